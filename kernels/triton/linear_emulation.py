"""`triton-emulation`: one fused Triton linear kernel for every MX weight x activation contract.

Why one kernel: emulation is the fallback for every contract no native path takes (mxfp6 and
mxint8 weights, mxfp6 / mxint8 / fp8-static activations, ...), so it must run them all without
writing a dequantized weight or a fake-quantized activation to memory. Each program owns an
[BLOCK_M, BLOCK_N] output tile and walks K in BLOCK_K steps:

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
from torch import Tensor

from kernels.activation_keys import FP8_STATIC_TENSOR_KEY, MX_DYNAMIC_KEYS
from kernels.base import LinearKernel, PreparedWeight
from kernels.dispatch import activation_qdq
from kernels.formats import FORMATS, get_format
from kernels.reference.linear import check_input
from kernels.triton.mx_codec import (
    KIND_OF_DTYPE, ROUNDING_CODE, _decode, _fp32_to_bf16_bits, _load_fp32,
    _nan_like, _pow2, _round_value, _store_fp32, format_constexprs,
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
    if ACT_MODE != 0:  # the QDQ result is cast to x's dtype (RNE), as the dispatcher does
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
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The dequantized weight tile [BLOCK_N, BLOCK_K] in fp32: code value * 2**E (exact);
    a scale byte 0xFF makes its block NaN. Masked-off entries are 0."""
    NB: tl.constexpr = BLOCK_K // 32
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    codes = _load_codes(data_ptr, stride_d, rows, kk, N, K, W_BITS, W_PACK, BLOCK_N, BLOCK_K)
    blk = kk * NB + tl.arange(0, NB)
    sbyte = tl.load(scale_ptr + rows.to(tl.int64)[:, None] * stride_s + blk[None, :],
                    mask=(rows < N)[:, None] & (blk < K // 32)[None, :], other=0).to(tl.int32)
    val = _decode(tl.reshape(codes, [BLOCK_N, NB, 32]), W_MBITS, W_BIAS, W_BITS, W_IS_INT,
                  W_SPECIALS)
    scale = tl.where(sbyte == 255, _nan_like(sbyte), _pow2(tl.minimum(sbyte, 254) - 127))
    val = val * scale[:, :, None]  # a NaN scale (byte 0xFF) makes the whole block NaN
    return tl.reshape(val, [BLOCK_N, BLOCK_K])


@triton.jit
def _emulated_linear_kernel(
        x_ptr, w_data_ptr, w_scale_ptr, s_ptr, bias_ptr, out_ptr, M, N, K,
        stride_x, stride_wd, stride_ws, stride_o,
        IN_KIND: tl.constexpr, OUT_KIND: tl.constexpr, HAS_BIAS: tl.constexpr,
        ACT_MODE: tl.constexpr, A_MBITS: tl.constexpr, A_BIAS: tl.constexpr,
        A_EMAX: tl.constexpr, A_MAX_NORMAL: tl.constexpr, A_MAXN_MANT: tl.constexpr,
        A_MAXN_SUB: tl.constexpr, A_IS_INT: tl.constexpr, A_ROUNDING: tl.constexpr,
        W_MBITS: tl.constexpr, W_BIAS: tl.constexpr, W_BITS: tl.constexpr,
        W_IS_INT: tl.constexpr, W_SPECIALS: tl.constexpr, W_PACK: tl.constexpr,
        DOT_KIND: tl.constexpr, DOT_PRECISION: tl.constexpr, HW_CAST: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        a = _act_tile(x_ptr, stride_x, s_ptr, M, K, pid_m, kk, IN_KIND, ACT_MODE, A_MBITS,
                      A_BIAS, A_EMAX, A_MAX_NORMAL, A_MAXN_MANT, A_MAXN_SUB, A_IS_INT,
                      A_ROUNDING, HW_CAST, BLOCK_M, BLOCK_K)
        w = _weight_tile(w_data_ptr, w_scale_ptr, stride_wd, stride_ws, N, K, pid_n, kk,
                         W_MBITS, W_BIAS, W_BITS, W_IS_INT, W_SPECIALS, W_PACK, BLOCK_N,
                         BLOCK_K)
        if DOT_KIND == 0:
            acc = tl.dot(a.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)), acc)
        else:
            acc = tl.dot(a, tl.trans(w), acc, input_precision=DOT_PRECISION)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if HAS_BIAS:
        acc = acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    _store_fp32(out_ptr + rows.to(tl.int64)[:, None] * stride_o + cols[None, :], acc,
                (rows < M)[:, None] & (cols < N)[None, :], OUT_KIND, HW_CAST)


# ----------------------------------------------------------------------------- launch set-up
_INTERPRETED = mx_quant._INTERPRETED
SMALL_M = 16  # M <= SMALL_M takes the decode tile
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages); BLOCK_K a multiple of 64 keeps fp4 bytes
# and fp6 words whole. Untuned first choices; GPU tuning is a later issue.
GPU_TILES = {"small": (16, 64, 128, 4, 3), "large": (64, 128, 64, 4, 3)}
# Interpreter: small tiles so the tests cover N, K and M tails and the K loop.
INTERPRETER_TILES = {"small": (16, 32, 64, 1, 1), "large": (32, 32, 64, 1, 1)}


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


_CACHE_KEY = "triton_emulation"


def fused_linear(x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None, *,
                 out_dtype: torch.dtype | None = None) -> Tensor:
    """x [..., K] -> [..., N] in `out_dtype` (default x's dtype): the contract's activation QDQ,
    weight dequant and matmul (fp32 accumulation, + bias) in one kernel launch. out_dtype
    fp32 exposes the accumulator before the final cast (used by the tests)."""
    check_input(x, prepared, _NAME)
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if out_dtype not in KIND_OF_DTYPE:
        raise ValueError(f"{_NAME}: out_dtype {out_dtype} is not float32, bfloat16 or float16")
    if not _INTERPRETED and not x.is_cuda:
        raise ValueError(f"{_NAME}: input is on {x.device}; the Triton kernel needs a CUDA / ROCm "
                         "tensor (or TRITON_INTERPRET=1 set before importing kernels.triton)")
    cached = prepared.cache.get(_CACHE_KEY)
    if cached is None:  # prepared by another kernel's prepare(): derive once, keep
        cached = prepared.cache.setdefault(_CACHE_KEY, _prepare_tensors(prepared))
    n, k = prepared.out_features, prepared.in_features
    lead = x.shape[:-1]
    x2d = x.reshape(-1, k)
    if k > 1 and x2d.stride(1) != 1:
        x2d = x2d.contiguous()
    m = x2d.shape[0]
    out = torch.empty((m, n), dtype=out_dtype, device=x.device)
    if bias is not None:
        if not isinstance(bias, Tensor) or tuple(bias.shape) != (n,):
            got = tuple(bias.shape) if isinstance(bias, Tensor) else type(bias).__name__
            raise ValueError(f"{_NAME}: bias must be a 1-D tensor of out_features={n} elements, "
                             f"got {got}")
        if not bias.is_floating_point() or bias.device != x.device:
            raise ValueError(f"{_NAME}: bias must be a float tensor on {x.device}, got "
                             f"{bias.dtype} on {bias.device}")
        bias = bias.to(torch.float32).contiguous()
    if m == 0:
        return out.view(*lead, n)
    consts = dict(cached["consts"])
    dot_kind, precision = _dot_choice(x.dtype, consts["ACT_MODE"])
    tiles = INTERPRETER_TILES if _INTERPRETED else GPU_TILES
    bm, bn, bk, warps, stages = tiles["small" if m <= SMALL_M else "large"]
    scale = cached["act_scale"]
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    data, scales = cached["data"], cached["scales"]
    _emulated_linear_kernel[grid](
        mx_quant._bits_view(x2d), data, scales, scale if scale is not None else scales,
        bias if bias is not None else scales, mx_quant._bits_view(out), m, n, k,
        x2d.stride(0), data.stride(0), scales.stride(0), out.stride(0),
        IN_KIND=KIND_OF_DTYPE[x.dtype], OUT_KIND=KIND_OF_DTYPE[out_dtype],
        HAS_BIAS=bias is not None, DOT_KIND=dot_kind, DOT_PRECISION=precision,
        HW_CAST=not _INTERPRETED,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages, **consts)
    return out.view(*lead, n)


class TritonEmulationLinear(LinearKernel):
    """Every MX weight x every dispatcher activation key (and weight-only) in one fused
    Triton kernel; equals ReferenceEmulationLinear up to fp32 summation order."""

    name = "triton-emulation"

    def finish_prepare(self, prepared: PreparedWeight) -> None:
        prepared.cache[_CACHE_KEY] = _prepare_tensors(prepared)

    def apply(self, x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None) -> Tensor:
        return fused_linear(x, prepared, bias)


__all__ = ["TritonEmulationLinear", "fused_linear"]
