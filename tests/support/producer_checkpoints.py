"""Tiny checkpoints made at test time by each producer's own quantize / export code, with the
producer's own dequantized weights as the oracle (never hand-typed imitations).

Each builder returns (checkpoint directory, {layer name: the producer's dequantized weight}).
The producers' libraries are the optional extra `.[producers]`; a test module that needs one
calls `pytest.importorskip` first. The model is a 1-layer Llama (hidden 64), built offline.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
             num_key_value_heads=1, vocab_size=128, max_position_embeddings=64)


def tiny_llama(seed: int = 0) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**LLAMA)).eval()


def _save(model: nn.Module, state: dict, directory: Path, quantization_config: dict) -> Path:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    config = model.config.to_dict()
    config["quantization_config"] = quantization_config
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file({k: v.contiguous() for k, v in state.items()}, str(directory / "model.safetensors"))
    return directory


# -- compressed-tensors -----------------------------------------------------------------------

CT_FORMATS = {"MXFP4A16": "mxfp4-pack-quantized", "MXFP6A16": "mxfp6-pack-quantized",
              "MXFP8A16": "mxfp8-quantized"}


def compressed_tensors_checkpoint(directory: Path, preset: str = "MXFP4A16"
                                  ) -> tuple[Path, dict[str, torch.Tensor]]:
    """compressed-tensors' own preset, scales (calculate_qparams: its MX observer maths),
    compressor (ModelCompressor.compress_model) and decompressor (the oracle)."""
    from compressed_tensors.compressors import BaseCompressor, ModelCompressor
    from compressed_tensors.quantization import (QuantizationConfig, apply_quantization_config,
                                                 preset_name_to_scheme)
    from compressed_tensors.quantization.utils.helpers import calculate_qparams

    model = tiny_llama()
    scheme = preset_name_to_scheme(preset, ["Linear"])
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme},
                                                        ignore=["lm_head"]))
    for module in model.modules():
        if isinstance(module, nn.Linear) and getattr(module, "quantization_scheme", None):
            w = module.weight.data
            groups = w.reshape(w.shape[0], -1, 32)
            scale, _ = calculate_qparams(groups.amin(-1), groups.amax(-1),
                                         module.quantization_scheme.weights)
            module.weight_scale.data.copy_(scale)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=CT_FORMATS[preset])
    compressor.compress_model(model)
    state = model.state_dict()
    codec = BaseCompressor.load_from_registry(CT_FORMATS[preset])
    oracle = {}
    for name, module in model.named_modules():
        if name + ".weight_scale" in state:
            local = {k.removeprefix(name + "."): v for k, v in state.items()
                     if k.startswith(name + ".") and k.count(".") == name.count(".") + 1}
            oracle[name] = codec.decompress(local, module.quantization_scheme)["weight"]
    qc = compressor.quantization_config.to_dict()
    return _save(model, state, directory, qc), oracle


# -- Quark -----------------------------------------------------------------------------------

def quark_checkpoint(directory: Path, layer_specs: dict[str, str] | None = None
                     ) -> tuple[Path, dict[str, torch.Tensor]]:
    """Quark's OCP MX specs, ModelQuantizer, freeze and export_safetensors; the oracle is
    Quark's own quantize-dequantize of each weight (the frozen weight quantizer), before export.
    `layer_specs`: {name pattern: spec class name} beside the global OCP_MXFP4Spec."""
    from quark.torch import ModelQuantizer, export_safetensors
    from quark.torch.quantization.config import config as qconfig

    def spec(name: str):
        return getattr(qconfig, name)(ch_axis=-1, is_dynamic=False).to_quantization_spec()

    model = tiny_llama()
    layers = {pattern: qconfig.QLayerConfig(weight=spec(cls))
              for pattern, cls in (layer_specs or {}).items()}
    config = qconfig.QConfig(global_quant_config=qconfig.QLayerConfig(weight=spec("OCP_MXFP4Spec")),
                             layer_quant_config=layers, exclude=["lm_head"])
    quantizer = ModelQuantizer(config)
    model = quantizer.freeze(quantizer.quantize_model(model, None))
    oracle = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            wq = getattr(module, "_weight_quantizer", None)
            if wq is not None:
                oracle[name] = wq(module.weight).detach().clone()
    export_safetensors(model, str(directory))
    return directory, oracle


# -- AutoRound -------------------------------------------------------------------------------

def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(LLAMA["vocab_size"] - 1)}
    vocab["<unk>"] = LLAMA["vocab_size"] - 1
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<unk>",
                                   eos_token="<unk>")


def auto_round_checkpoint(directory: Path, scheme: str = "MXFP4"
                          ) -> tuple[Path, dict[str, torch.Tensor]]:
    """AutoRound RTN (iters=0, disable_opt_rtn=True: offline, CPU) saved in its `auto_round`
    format; the oracle is AutoRound's own MX inference layer (experimental.qmodules.mx)
    dequantizing the stored tensors."""
    from auto_round import AutoRound
    from auto_round.experimental.qmodules.mx import MXFP4QuantLinear, MXFP8QuantLinear
    from safetensors import safe_open

    model = tiny_llama()
    rounder = AutoRound(model, tokenizer=_tokenizer(), scheme=scheme, iters=0,
                        disable_opt_rtn=True)
    rounder.quantize_and_save(str(directory), format="auto_round")
    found = [p.parent for p in Path(directory).rglob("config.json")]
    out = found[0]
    cls = MXFP8QuantLinear if "8" in scheme else MXFP4QuantLinear
    oracle = {}
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        for key in f.keys():
            if not key.endswith(".weight_scale"):
                continue
            layer = key.removesuffix(".weight_scale")
            scale = f.get_tensor(key)
            codes = f.get_tensor(layer + (".weight" if "8" in scheme else ".weight_packed"))
            n, k = scale.shape[0], scale.shape[1] * 32
            module = cls(k, n, config=None, weight=codes, weight_scale=scale,
                         dtype=torch.float32)
            oracle[layer] = module.dequant_weight_online()
    return out, oracle
