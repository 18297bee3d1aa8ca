"""The producers' stored MX tensors read by registry.checkpoints.formats, dequantized by our
reference, equal BIT FOR BIT to each producer's own dequantization of the same checkpoint; and
from_mx(to_mx(...)) gives back the stored bytes unchanged."""
from __future__ import annotations

import pytest
import torch

from kernels.mx import MXTensor, mx_dequantize, mx_quantize
from kernels.spec.contract import QuantKey
from registry.checkpoints.formats import (FORMATS, CheckpointFormatError,
                                          format_for_quant_method, get_format)
from registry.checkpoints.reader import CheckpointReader
from registry.files.catalog import load_schemes

CT_SCHEMES = {"MXFP4A16": "w_mxfp4", "MXFP6A16": "w_mxfp6_e2m3", "MXFP8A16": "w_mxfp8_e4m3"}
QUARK_SCHEMES = {"down_proj": "mxfp6_e3m2", "up_proj": "mxfp6_e2m3"}


def _key(fmt: str) -> QuantKey:
    return QuantKey.mx(fmt, rounding="even", static=False)


def _bits_equal(ours: torch.Tensor, theirs: torch.Tensor) -> bool:
    """Equal values and equal bits (signed zeros and NaNs included)."""
    ours = ours.to(theirs.dtype)
    width = {2: torch.int16, 4: torch.int32}[theirs.element_size()]
    return ours.shape == theirs.shape and torch.equal(ours.view(width), theirs.view(width))


def _check_roundtrip(fmt_name: str, reader: CheckpointReader, layer: str, key: QuantKey) -> MXTensor:
    fmt = FORMATS[fmt_name]
    mx = fmt.to_mx(layer, reader.get_tensor, key)
    stored = fmt.from_mx(layer, mx, key)
    for name, tensor in stored.items():
        original = reader.get_tensor(name)
        assert tensor.dtype == original.dtype and torch.equal(
            tensor.view(torch.uint8), original.view(torch.uint8)), name
    return mx


@pytest.mark.parametrize("preset", list(CT_SCHEMES))
def test_compressed_tensors_bits(ct_checkpoints, preset):
    directory, oracle = ct_checkpoints[preset]
    scheme = load_schemes().get(CT_SCHEMES[preset])
    with CheckpointReader(directory) as reader:
        layers = FORMATS["compressed-tensors"].layers(reader.names())
        assert sorted(layers) == sorted(oracle) and len(layers) == 7  # lm_head ignored
        for layer in layers:
            mx = _check_roundtrip("compressed-tensors", reader, layer, scheme.contract.weight)
            ours = mx_dequantize(mx, oracle[layer].dtype, backend="reference")
            assert _bits_equal(ours, oracle[layer]), layer


def test_quark_bits(quark_mixed):
    directory, oracle = quark_mixed
    with CheckpointReader(directory) as reader:
        layers = FORMATS["quark"].layers(reader.names())
        assert sorted(layers) == sorted(oracle) and len(layers) == 7
        for layer in layers:
            fmt = QUARK_SCHEMES.get(layer.rsplit(".", 1)[-1], "mxfp4")
            mx = _check_roundtrip("quark", reader, layer, _key(fmt))
            ours = mx_dequantize(mx, torch.float32, backend="reference")
            assert _bits_equal(ours, oracle[layer]), (layer, fmt)


@pytest.mark.parametrize("scheme", ["MXFP4", "MXFP8"])
def test_auto_round_bits(auto_round_checkpoints, scheme):
    directory, oracle = auto_round_checkpoints[scheme]
    fmt = "mxfp4" if scheme == "MXFP4" else "mxfp8_e4m3"
    with CheckpointReader(directory) as reader:
        layers = FORMATS["auto-round"].layers(reader.names())
        assert sorted(layers) == sorted(oracle) and len(layers) == 7
        for layer in layers:
            mx = _check_roundtrip("auto-round", reader, layer, _key(fmt))
            ours = mx_dequantize(mx, torch.float32, backend="reference")
            assert _bits_equal(ours, oracle[layer]), layer


def test_gpt_oss_bits_against_transformers():
    """gpt-oss's own quantizer needs the triton_kernels hub (not offline): every byte value is
    stored instead (random codes, scale bytes 100..150), and transformers' gpt-oss dequantizer
    (integrations/mxfp4.convert_moe_packed_tensors) is the oracle."""
    mxfp4 = pytest.importorskip("transformers.integrations.mxfp4")
    gen = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (3, 64, 4, 16), dtype=torch.uint8, generator=gen)
    scales = torch.randint(100, 151, (3, 64, 4), dtype=torch.uint8, generator=gen)
    stored = {"e.gate_up_proj_blocks": blocks, "e.gate_up_proj_scales": scales}
    fmt = FORMATS["gpt-oss"]
    mx = fmt.to_mx("e.gate_up_proj", stored.__getitem__, _key("mxfp4"))
    assert tuple(mx.shape) == (3, 64, 128)
    theirs = mxfp4.convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)  # [E, K, N]
    ours = mx_dequantize(mx, torch.float32, backend="reference").transpose(1, 2)
    assert _bits_equal(ours.contiguous(), theirs)
    back = fmt.from_mx("e.gate_up_proj", mx)
    assert all(torch.equal(back[k], v) for k, v in stored.items())


def test_from_mx_packs_and_names():
    x = torch.randn(64, 96)
    mx = mx_quantize(x, "mxfp6_e2m3", "even", backend="reference")  # default layout: unpacked
    out = FORMATS["compressed-tensors"].from_mx("l", mx)
    assert out["l.weight_packed"].shape == (64, 72) and out["l.weight_scale"].shape == (64, 3)
    fp8 = FORMATS["quark"].from_mx("l", mx_quantize(x, "mxfp8_e5m2", "even", backend="reference"))
    assert fp8["l.weight"].dtype == torch.float8_e5m2


def test_refusals_are_one_line():
    key = _key("mxfp4")
    stored = {"l.weight_packed": torch.zeros(64, 30, dtype=torch.uint8),
              "l.weight_scale": torch.zeros(64, 2, dtype=torch.uint8)}
    with pytest.raises(CheckpointFormatError, match=r"l\.weight_packed: uint8 \(64, 30\), expected "
                                                     r"uint8 \(64, 32\)"):
        FORMATS["compressed-tensors"].to_mx("l", stored.__getitem__, key)
    stored["l.weight_scale"] = torch.ones(64, 2)
    with pytest.raises(CheckpointFormatError, match="l.weight_scale: float32"):
        FORMATS["compressed-tensors"].to_mx("l", stored.__getitem__, key)
    with pytest.raises(CheckpointFormatError, match="stores mxfp4, mxfp8_e4m3 weights, not "
                                                     "mxfp6_e3m2"):
        FORMATS["auto-round"].tensor_names("l", "mxfp6_e3m2")
    with pytest.raises(ValueError, match="unknown checkpoint format 'gguf'"):
        get_format("gguf")
    assert format_for_quant_method("mxfp4").name == "gpt-oss"
    with pytest.raises(ValueError, match="quant_method 'awq'"):
        format_for_quant_method("awq")
    for message in ("x",):
        assert "\n" not in message
