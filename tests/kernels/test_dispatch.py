"""The activation-QDQ dispatcher and the pure-torch linear kernels."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels.base import PreparedWeight, load_kernel
from kernels.dispatch import UnknownActivationKey, activation_qdq, calibrate_act_scale
from kernels.mx import mx_dequantize, mx_qdq, mx_quantize
from kernels.select.activation_keys import DISPATCH_KEYS, FP8_STATIC_TENSOR_KEY, MX_DYNAMIC_KEYS
from kernels.spec.contract import QuantKey, ScaleDesc, SchemeContract
from registry import load_schemes

CATALOG = load_schemes()


def test_every_mx_format_and_rounding_has_an_entry():
    formats = {k.format for k in MX_DYNAMIC_KEYS}
    assert formats == {"mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8"}
    assert len(MX_DYNAMIC_KEYS) == 6 * 3


@pytest.mark.parametrize("key", sorted(MX_DYNAMIC_KEYS, key=str), ids=str)
def test_mx_entry_is_mx_qdq(key):
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(hash(str(key)) % 2**31),
                    dtype=torch.bfloat16) * 3
    got = activation_qdq(key)(x, None)
    want = mx_qdq(x, key.format, rounding=key.scale.rounding, backend="reference")
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    assert not torch.equal(got, x)  # quantization really happened
    with pytest.raises(ValueError, match="takes no static act_scale"):
        activation_qdq(key)(x, torch.tensor(1.0))


def test_fp8_static_entry():
    x = torch.randn(8, 64) * 5
    scale = calibrate_act_scale(FP8_STATIC_TENSOR_KEY, x)
    assert torch.isclose(scale, x.abs().max() / 448)
    got = activation_qdq(FP8_STATIC_TENSOR_KEY)(x, scale)
    want = (x / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale
    assert torch.equal(got, want) and not torch.equal(got, x)
    with pytest.raises(ValueError, match="is static: it needs a per-tensor scale"):
        activation_qdq(FP8_STATIC_TENSOR_KEY)(x, None)
    # values beyond the calibrated range saturate instead of turning into NaN
    big = activation_qdq(FP8_STATIC_TENSOR_KEY)(x * 10, scale)
    assert torch.isfinite(big).all() and big.abs().max() <= 448 * scale * (1 + 1e-6)


def test_unknown_key_is_an_error_not_a_pass_through():
    key = QuantKey(format="fp8_e4m3", scale=ScaleDesc(format="fp32", granularity="token",
                                                       static=False))
    assert key not in DISPATCH_KEYS
    with pytest.raises(UnknownActivationKey) as e:
        activation_qdq(key)
    msg = str(e.value)
    assert "no entry for fp8_e4m3:fp32/token:dynamic" in msg
    assert "mxfp6_e3m2:e8m0/b32:even:dynamic" in msg  # lists the known keys


# --- pure-torch linear kernels ------------------------------------------------------------------

def _prepare(kernel, scheme, w, x):
    s = CATALOG.schemes[scheme]
    static = s.activation is not None and s.activation.static
    return kernel.prepare(w, s.contract, calibration=x if static else None)


@pytest.mark.parametrize("scheme", sorted(CATALOG.schemes))
def test_reference_emulation_is_qdq_then_linear(scheme):
    g = torch.Generator().manual_seed(len(scheme))
    w = torch.randn(24, 96, generator=g)
    x = torch.randn(2, 3, 96, generator=g).to(torch.bfloat16)
    b = torch.randn(24, generator=g)
    k = load_kernel("reference-emulation")
    p = _prepare(k, scheme, w, x)
    got = k.apply(x, p, b)
    key = p.contract.activation
    xq = x if key is None else activation_qdq(key)(x, p.act_scale)
    wq = mx_dequantize(mx_quantize(w, p.contract.weight.format,
                                   rounding=p.contract.weight.scale.rounding))
    want = F.linear(xq.float(), wq, b).to(x.dtype)
    assert got.shape == (2, 3, 24) and got.dtype == torch.bfloat16
    assert torch.equal(got, want)
    if key is not None:  # the declared activation quantization really happened
        assert not torch.equal(got, F.linear(x.float(), wq, b).to(x.dtype))


def test_weight_only_kernel():
    k = load_kernel("dequant-weight-only")
    w, x = torch.randn(16, 64), torch.randn(5, 64)
    p = k.prepare(w, CATALOG.schemes["w_mxfp8_e4m3"].contract)
    want = load_kernel("reference-emulation").apply(x, p)
    assert torch.allclose(k.apply(x, p), want, rtol=1e-5, atol=1e-5)
    bad = SchemeContract(weight=p.contract.weight,
                         activation=QuantKey.mx("mxfp8_e4m3", rounding="even", static=False))
    with pytest.raises(ValueError, match="weight-only and would ignore the activation key"):
        k.prepare(w, bad)
    p2 = PreparedWeight(p.weight, bad)  # built by hand, past prepare: apply still refuses it
    with pytest.raises(ValueError, match="weight-only but the contract quantizes activations"):
        k.apply(x, p2)


def test_prepare_errors():
    k = load_kernel("reference-emulation")
    c = CATALOG.schemes["w_mxfp4_a_mxfp4"].contract
    with pytest.raises(ValueError, match=r"2-D tensor \[out_features, in_features\], got \(64,\)"):
        k.prepare(torch.randn(64), c)
    mx = mx_quantize(torch.randn(8, 64), "mxfp4", rounding="floor")
    with pytest.raises(ValueError, match="mxfp4/floor but the contract's weight key is"):
        k.prepare(mx, c)
    with pytest.raises(ValueError, match="takes no act_scale"):
        k.prepare(torch.randn(8, 64), c, act_scale=1.0)
    c8 = CATALOG.schemes["w_mxfp4_a_fp8"].contract
    with pytest.raises(ValueError, match="is static: pass act_scale="):
        k.prepare(torch.randn(8, 64), c8)
    with pytest.raises(ValueError, match="must be finite and > 0"):
        k.prepare(torch.randn(8, 64), c8, act_scale=0.0)
    p = k.prepare(torch.randn(8, 64), c)
    with pytest.raises(ValueError, match=r"input shape \(2, 32\) does not end in in_features=64"):
        k.apply(torch.randn(2, 32), p)
    with pytest.raises(KeyError, match="unknown kernel 'nope'"):
        load_kernel("nope")
