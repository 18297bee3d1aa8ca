"""Host side of the tiles shared by the emulation linear kernels (tiled, decode, MoE): the
preparation of a weight's kernel-ready tensors and constexprs (`prepare_tensors`) and the dot
operand choice (`dot_choice`). The device tiles themselves, `act_tile` (the activation tile
after the contract's QDQ) and `weight_tile` (the dequantized weight tile), live in mx_tiles.

Numerics of every kernel built from these tiles:
  activation tile [BLOCK_M, BLOCK_K] -> QDQ in registers, bit-exact with the dispatcher
      (dynamic MX: block max over 32 K-elements via [BLOCK_M, BLOCK_K // 32, 32], shared
      exponent, element rounding; static fp8 E4M3: true division by the per-tensor scale,
      saturate, RNE, times the scale), then cast to x's dtype like mx_qdq / fp8_tensor_qdq do;
  weight tile [BLOCK_N, BLOCK_K] -> codes (any layout) * 2**E in fp32, exact (0xFF: NaN);
  tl.dot with fp32 accumulation, + bias, one cast to x's dtype (RNE) at the store.

Dot operand type: the operands are always exact in it, so the result differs from the
reference (fp32 F.linear) only by the accumulation order:
  bf16 when the activation holds <= 8 significant bits (bf16 inputs, or any MX-QDQ'd input;
       MX weights always do); fp32 otherwise — "tf32" for fp16 inputs (11 bits fit tf32's 11)
       where the backend allows it, "ieee" for fp32 inputs. Values below 2**-126 (a shared
       exponent near -127) may lose low bits in a bf16 / tf32 operand: a known gap.
  Under TRITON_INTERPRET=1 the operands always go as fp32 ("ieee"): the triton 3.8
  interpreter's tl.dot reads bf16 operands as their raw uint16 bits. The values fed are the
  same exact numbers, so the interpreted result equals the compiled one up to summation order.

The element bit rules come from kernels.triton.mx_codec helpers (reused, not copied).
"""
from __future__ import annotations

import functools

import torch
import triton

from kernels.base import PreparedWeight
from kernels.dispatch import activation_qdq
from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY, MX_DYNAMIC_KEYS
from kernels.spec.formats import FORMATS, get_format
from kernels.triton.mx_codec import ROUNDING_CODE, format_constexprs
from kernels.triton import mx_quant

KERNEL_NAME = "triton-emulation"
ACT_NONE, ACT_MX, ACT_FP8_STATIC = 0, 1, 2  # the ACT_MODE constexpr
DOT_BF16, DOT_FP32 = 0, 1  # the DOT_KIND constexpr
_FP8 = FORMATS["mxfp8_e4m3"]  # fp8_e4m3fn has the same element grid: max 448, subnormals 2**-9


_INTERPRETED = mx_quant._INTERPRETED


@functools.cache
def _fp32_dot_precision_for_fp16() -> str:
    """'tf32' (exact for fp16 values) where the backend offers it, else 'ieee'."""
    if _INTERPRETED:
        return "ieee"
    target = triton.runtime.driver.active.get_current_target()
    if target.backend == "cuda" or (target.backend == "hip" and target.arch == "gfx942"):
        return "tf32"
    return "ieee"


def dot_choice(in_dtype: torch.dtype, act_mode: int) -> tuple[int, str]:
    """(DOT_KIND, DOT_PRECISION) whose operand type holds both operands exactly."""
    if _INTERPRETED:
        return DOT_FP32, "ieee"
    if in_dtype == torch.bfloat16 or act_mode == ACT_MX:
        return DOT_BF16, "ieee"  # precision unused for bf16 operands
    if in_dtype == torch.float16:
        return DOT_FP32, _fp32_dot_precision_for_fp16()
    return DOT_FP32, "ieee"


def weight_may_overflow(max_normal: float, scales: torch.Tensor) -> bool:
    """Whether some block's code * 2**E can pass fp32's max (a scale byte near 254): only then
    do the weight tiles pay for the saturation that mx_dequantize applies (one device sync, at
    preparation)."""
    finite = scales[scales != 255]
    return bool(finite.numel()) and max_normal * 2.0 ** (int(finite.max()) - 127) > \
        torch.finfo(torch.float32).max


def prepare_tensors(prepared: PreparedWeight) -> dict:
    """Kernel-ready weight tensors and constexprs of a prepared weight (built once)."""
    weight = prepared.weight
    key = prepared.contract.activation
    pack = mx_quant.pack_code(weight.elem_format, weight.layout)
    data = weight.data.contiguous()
    if pack == 2:  # mx_quant's fp6 packed reader takes little-endian int32 words
        try:
            data = data.view(torch.int32)
        except RuntimeError:  # storage offset not word aligned: a dense copy is
            data = data.clone().view(torch.int32)
    consts = {f"W_{k}": v for k, v in format_constexprs(weight.elem_format).items()
              if k in ("MBITS", "BIAS", "BITS", "IS_INT", "SPECIALS")}
    consts["W_PACK"] = pack
    consts["W_SAT"] = int(weight_may_overflow(weight.elem_format.max_normal, weight.scales))
    act_scale = None
    if key is None:
        mode, act_fmt, rounding = ACT_NONE, _FP8, 0  # activation constexprs unused
    elif key in MX_DYNAMIC_KEYS:
        mode, act_fmt, rounding = ACT_MX, get_format(key.format), ROUNDING_CODE[key.scale.rounding]
    elif key == FP8_STATIC_TENSOR_KEY:
        mode, act_fmt, rounding = ACT_FP8_STATIC, _FP8, 0
        if prepared.act_scale is None:
            raise ValueError(f"{KERNEL_NAME}: activation key {key} is static but the prepared "
                             "weight has no act_scale; prepare it with act_scale= or calibration=")
        act_scale = prepared.act_scale.to(device=data.device, dtype=torch.float32).reshape(1)
    else:
        activation_qdq(key)  # raises UnknownActivationKey for a key the dispatcher lacks
        raise ValueError(f"{KERNEL_NAME}: no in-kernel QDQ for activation key {key}; this kernel "
                         "implements dynamic MX keys and fp8_e4m3:fp32/tensor:static only")
    fc = format_constexprs(act_fmt)
    consts.update({f"A_{k}": fc[k] for k in ("MBITS", "BIAS", "EMAX", "MAX_NORMAL", "MAXN_MANT",
                                               "MAXN_SUB", "IS_INT")})
    consts.update(A_ROUNDING=rounding, ACT_MODE=mode)
    return {"data": data, "scales": weight.scales.contiguous(), "act_scale": act_scale,
            "consts": consts, "n": prepared.out_features, "k": prepared.in_features,
            "plans": {}}


