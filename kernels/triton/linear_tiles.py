"""Device tiles shared by the emulation linear kernels (tiled, decode, MoE): the activation
tile after the contract's QDQ and the dequantized weight tile, plus the host-side preparation
of a weight's kernel-ready tensors and constexprs.

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

The element bit rules come from kernels.triton.mx_codec / mx_quant helpers (reused, not copied).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.base import PreparedWeight
from kernels.dispatch import activation_qdq
from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY, MX_DYNAMIC_KEYS
from kernels.spec.formats import FORMATS, get_format
from kernels.triton.mx_codec import (
    ROUNDING_CODE, _decode, _e8m0_value, _fp32_to_bf16_bits, _load_fp32, _nan_like, _pow2,
    _round_value, _saturate, _scaled_saturated, format_constexprs,
)
from kernels.triton import mx_quant
from kernels.triton.mx_quant import _load_codes, _tile_scaled

_NAME = "triton-emulation"
ACT_NONE, ACT_MX, ACT_FP8_STATIC = 0, 1, 2  # the ACT_MODE constexpr
DOT_BF16, DOT_FP32 = 0, 1  # the DOT_KIND constexpr
_FP8 = FORMATS["mxfp8_e4m3"]  # fp8_e4m3fn has the same element grid: max 448, subnormals 2**-9


@triton.jit
def _act_tile(x_ptr, stride_x, s_ptr, M, K, pid_m, kk, IN_KIND: tl.constexpr,
              ACT_MODE: tl.constexpr, A_MBITS: tl.constexpr, A_BIAS: tl.constexpr,
              A_EMAX: tl.constexpr, A_MAX_NORMAL: tl.constexpr, A_MAXN_MANT: tl.constexpr,
              A_MAXN_SUB: tl.constexpr, A_IS_INT: tl.constexpr, A_ROUNDING: tl.constexpr,
              HW_CAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """The activation tile [BLOCK_M, BLOCK_K] after the contract's QDQ, as fp32 values that
    x's dtype holds exactly (the dispatcher's output, bit for bit). Masked-off entries are 0."""
    if ACT_MODE == 1:  # dynamic MX: the same steps as mx_quant's fused QDQ kernel
        v, e, bad, rows = _tile_scaled(x_ptr, stride_x, M, K, pid_m, kk, BLOCK_M, BLOCK_K,
                                       IN_KIND, A_MBITS, A_EMAX, A_MAXN_MANT, A_MAXN_SUB,
                                       A_ROUNDING)
        # rceil scales keep |v| <= max normal: no clamp needed (as mx_quant's QDQ kernel)
        val = _round_value(v, A_MBITS, A_BIAS, A_MAX_NORMAL, A_IS_INT, SATURATE=A_ROUNDING != 2)
        val = val * tl.where(bad, _nan_like(e), _pow2(e))[:, :, None]  # NaN / Inf blocks: NaN
        x = tl.reshape(val, [BLOCK_M, BLOCK_K])
    else:
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = kk * BLOCK_K + tl.arange(0, BLOCK_K)
        mask = (rows < M)[:, None] & (cols < K)[None, :]
        x = _load_fp32(x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :], mask,
                       IN_KIND)
        if ACT_MODE == 2:  # static fp8 E4M3: clamp(x / s, +-448) -> RNE -> * s
            s = tl.load(s_ptr)
            y = tl.div_rn(x, s)  # a true (IEEE) division, as torch's x.float() / scale
            # _round_value saturates at +-448 (Inf too) and rounds to the E4M3 grid; a NaN
            # must stay NaN (the min inside it would drop it on a GPU).
            q = _round_value(y, A_MBITS, A_BIAS, A_MAX_NORMAL, A_IS_INT)
            x = tl.where(x != x, x, q * s)
    if ACT_MODE != 0:  # the QDQ result is saturated and cast to x's dtype (RNE), as the
        x = _saturate(x, IN_KIND)  # dispatcher does: a finite input never becomes Inf
        if IN_KIND == 1:  # HW_CAST: the GPU's RNE convert; the interpreter's cast truncates
            if HW_CAST:
                x = x.to(tl.bfloat16).to(tl.float32)
            else:
                x = (_fp32_to_bf16_bits(x).to(tl.int32) << 16).to(tl.float32, bitcast=True)
        elif IN_KIND == 2:
            x = x.to(tl.float16).to(tl.float32)
    return x


@triton.jit
def _weight_tile(data_ptr, scale_ptr, stride_d, stride_s, N, K, pid_n, kk,
                 W_MBITS: tl.constexpr, W_BIAS: tl.constexpr, W_BITS: tl.constexpr,
                 W_IS_INT: tl.constexpr, W_SPECIALS: tl.constexpr, W_PACK: tl.constexpr,
                 W_SAT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The dequantized weight tile [BLOCK_N, BLOCK_K] in fp32: code value * 2**E (exact);
    a scale byte 0xFF makes its block NaN. Masked-off entries are 0. W_SAT (a weight whose
    largest block can pass fp32's max, `weight_may_overflow`): saturated to +-fp32 max like
    mx_dequantize's reference (an E5M2 Inf code stays Inf)."""
    NB: tl.constexpr = BLOCK_K // 32
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    codes = _load_codes(data_ptr, stride_d, rows, kk, N, K, W_BITS, W_PACK, BLOCK_N, BLOCK_K)
    blk = kk * NB + tl.arange(0, NB)
    sbyte = tl.load(scale_ptr + rows.to(tl.int64)[:, None] * stride_s + blk[None, :],
                    mask=(rows < N)[:, None] & (blk < K // 32)[None, :], other=0).to(tl.int32)
    val = _decode(tl.reshape(codes, [BLOCK_N, NB, 32]), W_MBITS, W_BIAS, W_BITS, W_IS_INT,
                  W_SPECIALS)
    if W_SAT:
        val = _scaled_saturated(val, _e8m0_value(sbyte)[:, :, None], 0, W_SPECIALS)
    else:
        val = val * _e8m0_value(sbyte)[:, :, None]  # a NaN scale (0xFF): the whole block NaN
    return tl.reshape(val, [BLOCK_N, BLOCK_K])


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


def _dot_choice(in_dtype: torch.dtype, act_mode: int) -> tuple[int, str]:
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


def _prepare_tensors(prepared: PreparedWeight) -> dict:
    """Kernel-ready weight tensors and constexprs of a prepared weight (built once)."""
    weight = prepared.weight
    key = prepared.contract.activation
    pack = mx_quant._pack_code(weight.elem_format, weight.layout)
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
            raise ValueError(f"{_NAME}: activation key {key} is static but the prepared weight "
                             "has no act_scale; prepare it with act_scale= or calibration=")
        act_scale = prepared.act_scale.to(device=data.device, dtype=torch.float32).reshape(1)
    else:
        activation_qdq(key)  # raises UnknownActivationKey for a key the dispatcher lacks
        raise ValueError(f"{_NAME}: no in-kernel QDQ for activation key {key}; this kernel "
                         "implements dynamic MX keys and fp8_e4m3:fp32/tensor:static only")
    fc = format_constexprs(act_fmt)
    consts.update({f"A_{k}": fc[k] for k in ("MBITS", "BIAS", "EMAX", "MAX_NORMAL", "MAXN_MANT",
                                               "MAXN_SUB", "IS_INT")})
    consts.update(A_ROUNDING=rounding, ACT_MODE=mode)
    return {"data": data, "scales": weight.scales.contiguous(), "act_scale": act_scale,
            "consts": consts}


