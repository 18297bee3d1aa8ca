"""config.json quantization_configs written by the producers' own code (never typed by hand).

Why: the mapping of registry/configs must follow what the producers really write, and issue 15
found the gaps only with producer-written configs. Each function runs the producer offline on
CPU and returns the parsed config.json:

- `compressed_tensors_config(preset)`: a compressed-tensors preset scheme (MXFP4A16, MXFP6A8,
  ...) through `infer_module_format` and `ModelCompressor.update_config`, as llm-compressor saves.
- `autoround_configs(out, runs)`: AutoRound (`iters=0, disable_opt_rtn=True`, RTN) on a tiny
  random Llama, saved with `format="auto_round"` (about 3 s a run, 6 s to import).
- `gptoss_config(skip)`: transformers' `Mxfp4Config` (gpt-oss, `quant_method: "mxfp4"`) inside
  a `GptOssConfig`, as `save_pretrained` writes it.
- `quark_configs()`: amd-quark's own `QConfig.to_dict()` plus its exporter's `export` block.
  Importing quark.torch takes ~50 s, so its output is kept in tests/data/hf_configs/producers/
  (`python tests/support/producer_configs.py` rewrites those files;
  tests/registry/configs/test_producer_configs.py compares them with a fresh run).
"""
from __future__ import annotations

import glob
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make `support.*` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.paths import HF_CONFIGS  # noqa: E402

PRODUCERS_DIR = HF_CONFIGS / "producers"
QUARK_FILES = ("quark_mxint8.json", "quark_block_fp8.json", "quark_nvfp4.json")


def compressed_tensors_config(preset: str, ignore: tuple[str, ...] = ("lm_head",)) -> dict:
    """The config.json compressed-tensors writes for one preset scheme on every Linear."""
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.compressors.format import infer_module_format
    from compressed_tensors.quantization import (QuantizationConfig, QuantizationScheme,
                                                 QuantizationStatus, preset_name_to_scheme)

    scheme: QuantizationScheme = preset_name_to_scheme(preset, ["Linear"])
    scheme.format = infer_module_format(torch.nn.Linear, scheme).value
    config = QuantizationConfig(config_groups={"group_0": scheme}, format=scheme.format,
                                ignore=list(ignore),
                                quantization_status=QuantizationStatus.COMPRESSED)
    with tempfile.TemporaryDirectory() as out:
        ModelCompressor(quantization_config=config).update_config(out)
        return json.loads((Path(out) / "config.json").read_text())


def _tiny_llama():
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(1, 64)} | {"[UNK]": 0},
                                       unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]")
    cfg = LlamaConfig(hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, vocab_size=64)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(torch.bfloat16), tok


def autoround_configs(out: Path, runs: dict[str, tuple[Any, dict]]) -> dict[str, dict]:
    """{name: config.json} of AutoRound RTN runs {name: (scheme, AutoRound kwargs)}."""
    from auto_round import AutoRound

    found = {}
    for name, (scheme, kwargs) in runs.items():
        model, tok = _tiny_llama()
        ar = AutoRound(model, tokenizer=tok, scheme=scheme, iters=0, disable_opt_rtn=True,
                       **kwargs)
        ar.quantize()
        ar.save_quantized(str(out / name), format="auto_round")
        path = sorted(glob.glob(str(out / name / "**" / "config.json"), recursive=True))[0]
        found[name] = json.loads(Path(path).read_text())
    return found


def gptoss_config(skip: list[str] | None) -> dict:
    """A gpt-oss config.json with transformers' Mxfp4Config (what save_pretrained writes)."""
    from transformers import GptOssConfig, Mxfp4Config

    cfg = GptOssConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=64,
                       num_local_experts=4, num_attention_heads=2, num_key_value_heads=1,
                       head_dim=32, vocab_size=64)
    cfg.quantization_config = Mxfp4Config(modules_to_not_convert=skip)
    return json.loads(cfg.to_json_string())


def quark_configs() -> dict[str, dict]:
    """{file name: config.json} from amd-quark's own config classes and exporter settings."""
    import dataclasses

    from quark.torch.export.config.config import JsonExporterConfig
    from quark.torch.quantization.config.config import (OCP_MXINT8Spec, QConfig, QLayerConfig,
                                                        QTensorConfig)
    from quark.torch.quantization.config.template import FP4Block16ScaleE4M3Scheme

    def config(layer: Any) -> dict:
        q = QConfig(global_quant_config=layer, exclude=["lm_head"]).to_dict()
        q["export"] = dataclasses.asdict(JsonExporterConfig())
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "quantization_config": q}

    mxint8 = QLayerConfig(weight=OCP_MXINT8Spec(ch_axis=-1, is_dynamic=False)
                          .to_quantization_spec(),
                          input_tensors=OCP_MXINT8Spec(ch_axis=-1, is_dynamic=True)
                          .to_quantization_spec())
    # the specs Quark writes for a DeepSeek-style 128x128 block-FP8 checkpoint
    # (quark/torch/quantization/file2file_quantization.py, exclude-aware config)
    block = dict(dtype="fp8_e4m3", symmetric=True, round_method="half_even")
    fp8 = QLayerConfig(
        weight=QTensorConfig.from_dict(dict(block, qscheme="per_block", block_size=[128, 128],
                                            ch_axis=None, group_size=None,
                                            is_dynamic=False, scale_type="float32",
                                            observer_cls="PerBlock2DMinMaxObserver")),
        input_tensors=QTensorConfig.from_dict(dict(block, qscheme="per_group", ch_axis=-1,
                                                   group_size=128, is_dynamic=True,
                                                   observer_cls="PerGroupMinMaxObserver")))
    return {"quark_mxint8.json": config(mxint8), "quark_block_fp8.json": config(fp8),
            "quark_nvfp4.json": config(FP4Block16ScaleE4M3Scheme().config)}


def write_quark_files() -> None:
    PRODUCERS_DIR.mkdir(parents=True, exist_ok=True)
    for name, cfg in quark_configs().items():
        (PRODUCERS_DIR / name).write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_quark_files()
    print("wrote", ", ".join(QUARK_FILES), "to", PRODUCERS_DIR)
