"""`triton-dot-scaled`: an MX linear layer on Triton's `tl.dot_scaled`.

Weights mxfp4 / mxfp8_e4m3 / mxfp8_e5m2 go to dot_scaled as stored: the rhs [K, N] is read
k-major straight from our [N, K(/2)] MXTensor bytes (mxfp4's packed layout, element 2i in the
low nibble, is dot_scaled's e2m1 layout) and rhs_scale is the [N, K/32] scale bytes as they are.
The lhs, per `LHS_MODES`:
- "x":       weight-only: x itself as the bf16 / fp16 lhs, no scale (W4A16 / W8A16);
- "mx":      x quantized first by the Triton quantize kernel (bit-exact with the dispatcher's
             QDQ); its codes + scale bytes are dot_scaled's lhs + lhs_scale (native MX MMA on
             sm100+ / gfx950);
- "decoded": the same codes decoded in the kernel to x's dtype (code * 2**E in fp32, RNE cast:
             exactly the dispatcher's QDQ), then a bf16 / fp16 lhs. Used where dot_scaled would
             only emulate an MX lhs anyway, and for fp16 x, whose QDQ rounds to fp16.
Semantics are those of `ReferenceEmulationLinear` (QDQ'd activation in x's dtype times the
dequantized weight, fp32 accumulation, output in x's dtype); only the summation order differs.

Numerics notes:
- A scale byte 0xFF (NaN block) must make every output it touches NaN. The interpreter decodes
  0xFF as +Inf (Inf * code can give +-Inf, not NaN) and the GPU emulation masks it only without
  fast_math, so the kernel ORs per-row / per-column "has a 0xFF scale" flags itself and writes
  NaN there; that makes fast_math (no per-element NaN select in the emulated upcast) safe.
- Without MX tensor cores dot_scaled upcasts both operands to bf16, or to fp16 when one operand
  is fp16; a weight value code * 2**E is exact in fp16 only inside a scale range. With an fp16
  lhs the kernel uses the fp16 dot only when every weight scale is in that range (checked once
  at prepare); otherwise it splits the lhs exactly into two bf16 parts of x's sign and sums two
  bf16 dots (`_split_bf16`).
- Special weight codes never reach dot_scaled. On Hopper (triton 3.6) the emulated upcast of an
  e5m2 operand next to a bf16 lhs is a shift-and-add-bias bit trick that turns Inf (0x7C) into
  the finite 2**16 and NaN (0x7E) into 1.5 * 2**16 (fast_math or not; the fp16 lhs path and the
  interpreter decode them right). So `finish_prepare` folds a NaN code into its block's scale
  (0xFF: the column is NaN either way) and moves each +-Inf code out of the MMA (code 0, kept
  as a sparse list); `dot_scaled_linear` adds x_qdq[:, k] * (+-Inf) to those columns after the
  kernel, in IEEE fp32 (0 * Inf = NaN, Inf - Inf = NaN: the reference's arithmetic).
- Known gaps: dot_scaled multiplies codes by scales itself, so a weight block whose code * 2**E
  passes fp32's max (a scale byte near 254) is not saturated as mx_dequantize saturates it
  (docs/numerics.md, "Saturation on the way back"); no real weight comes near. A scale byte
  0x00 (2**-127) is read as 0 by dot_scaled itself (interpreter and GPU), so weight blocks (and "mx"-mode activation blocks) below 2**-124 contribute 0. The
  interpreter (not a GPU) passes a bf16 lhs through fp16, so bf16 activations beyond fp16's
  range or below its subnormals are inexact there.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernels.base import LinearKernel, PreparedWeight
from kernels.dispatch import activation_qdq
from kernels.reference.linear import check_input
from kernels.select.declarations import DOT_SCALED_FORMATS, KERNELS_BY_NAME
from kernels.spec.formats import E8M0_BIAS, E8M0_NAN, get_format
from kernels.triton import fit, mx_quant
from kernels.triton.fit import TileConfig
from kernels.triton.mx_codec import (
    KIND_FP32, KIND_OF_DTYPE, SPECIALS_CODE, decode, fp32_to_bf16_bits, load_codes, load_fp32,
    nan_like, pow2, store_fp32,
)
from kernels.spec.contract import QuantKey
from kernels.spec.platform import Platform

NAME = "triton-dot-scaled"
CACHE_KEY = NAME  # the prepared.cache entry holding the _WeightOperands
#: MX element format -> dot_scaled's format string.
DOT_FORMAT = {"mxfp4": "e2m1", "mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2"}
assert set(DOT_FORMAT) == set(DOT_SCALED_FORMATS), "DOT_FORMAT and the declaration disagree"
LHS_MODES = {"x": 0, "mx": 1, "decoded": 2}
ACT_DTYPES = (torch.bfloat16, torch.float16)
# Per-element NaN selects in the emulated upcast are redundant with the kernel's 0xFF masks.
FAST_MATH = True
#: Decode (M <= SMALL_M) and large-M tiles: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages).
SMALL_M = 16
TILE_SMALL_M = (16, 64, 128, 4, 3)
TILE_LARGE_M = (64, 128, 128, 4, 3)
_INTERPRETED = mx_quant._INTERPRETED


@triton.jit
def _split_bf16(a):
    """fp16 tile -> bf16 (hi, lo), hi + lo == a exactly. A nonzero finite value gets two nonzero
    parts of its sign (so part * Inf is Inf like a * Inf); Inf / NaN go to both parts."""
    f = a.to(tl.float32)
    bits = f.to(tl.int32, bitcast=True)
    mag = bits & 0x7FFFFFFF
    finite = mag < 0x7F800000
    hi_bits = bits & -65536  # fp32 with bf16's 7 mantissa bits: truncation toward zero
    hi_bits = tl.where((hi_bits == bits) & (mag != 0), hi_bits - 65536, hi_bits)  # lo != 0
    special = tl.where(mag > 0x7F800000, 0x7FC00000, bits)  # one quiet NaN: casts keep it
    hi = tl.where(finite, hi_bits, special).to(tl.float32, bitcast=True)
    lo = tl.where(finite, f - hi, hi)  # exact: at most 4 significant bits
    return hi.to(tl.bfloat16), lo.to(tl.bfloat16)


@triton.jit
def _to_act_dtype(f, ACT_KIND: tl.constexpr, HW_CAST: tl.constexpr):
    """fp32 -> bf16 / fp16, round to nearest even (the interpreter's bf16 cast truncates)."""
    if ACT_KIND == 2:
        r = f.to(tl.float16)
    elif HW_CAST:
        r = f.to(tl.bfloat16)
    else:
        r = fp32_to_bf16_bits(f).to(tl.bfloat16, bitcast=True)
    return r


@triton.jit
def _dot_scaled_linear_kernel(
    a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, bias_ptr, out_ptr,
    M, N, K, stride_am, stride_asm, stride_wn, stride_wsn, stride_om,
    LHS_MODE: tl.constexpr, LHS_FMT: tl.constexpr, RHS_FMT: tl.constexpr,
    RHS_PACK: tl.constexpr, A_MBITS: tl.constexpr, A_BIAS: tl.constexpr, A_BITS: tl.constexpr,
    A_SPECIALS: tl.constexpr, A_PACK: tl.constexpr, ACT_KIND: tl.constexpr,
    SPLIT_FP16: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_KIND: tl.constexpr,
    OUT_KIND: tl.constexpr, HW_CAST: tl.constexpr, FAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """out[M, N] = lhs[M, K] @ W[N, K]^T (+ bias), one [BLOCK_M, BLOCK_N] tile a program.
    K % BLOCK_K == 0 (checked by the caller), so the K loop needs no mask. A_PACK: 1 when the
    lhs is packed e2m1 (two codes a byte), else 0."""
    tl.static_assert(BLOCK_K % 32 == 0, "BLOCK_K must hold whole 32-element MX blocks")
    tl.static_assert((BLOCK_M & (BLOCK_M - 1)) == 0, "BLOCK_M must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_N & (BLOCK_N - 1)) == 0, "BLOCK_N must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_K & (BLOCK_K - 1)) == 0, "BLOCK_K must be a power of two (tl.arange)")
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < N
    NB: tl.constexpr = BLOCK_K // 32
    A_BYTES: tl.constexpr = BLOCK_K // (1 + A_PACK)
    ka = tl.arange(0, A_BYTES)
    kw = tl.arange(0, BLOCK_K // RHS_PACK)
    ks = tl.arange(0, NB)
    a_ptrs = a_ptr + offs_m.to(tl.int64)[:, None] * stride_am + ka[None, :]
    as_ptrs = a_scale_ptr + offs_m.to(tl.int64)[:, None] * stride_asm + ks[None, :]
    # rhs tile [BLOCK_K / pack, BLOCK_N], read k-major from the [N, K / pack] weight bytes
    w_ptrs = w_ptr + offs_n.to(tl.int64)[None, :] * stride_wn + kw[:, None]
    ws_ptrs = w_scale_ptr + offs_n.to(tl.int64)[:, None] * stride_wsn + ks[None, :]
    row_nan = tl.zeros([BLOCK_M], dtype=tl.int32)
    col_nan = tl.zeros([BLOCK_N], dtype=tl.int32)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kt in range(0, K // BLOCK_K):
        w = tl.load(w_ptrs, mask=n_ok[None, :], other=0)
        ws = tl.load(ws_ptrs, mask=n_ok[:, None], other=127)
        col_nan = tl.maximum(col_nan, tl.max((ws == 255).to(tl.int32), axis=1))
        if LHS_MODE != 0:
            a_s = tl.load(as_ptrs, mask=m_ok[:, None], other=127)
            row_nan = tl.maximum(row_nan, tl.max((a_s == 255).to(tl.int32), axis=1))
        if LHS_MODE == 1:
            a = tl.load(a_ptrs, mask=m_ok[:, None], other=0)
            acc = tl.dot_scaled(a, a_s, LHS_FMT, w, ws, RHS_FMT, acc=acc, fast_math=FAST)
        else:
            if LHS_MODE == 0:
                a = tl.load(a_ptrs, mask=m_ok[:, None], other=0)
            else:
                codes = load_codes(a_ptr, stride_am, offs_m, kt, M, K, A_BITS, A_PACK,
                                   BLOCK_M, BLOCK_K)
                val = decode(tl.reshape(codes, [BLOCK_M, NB, 32]), A_MBITS, A_BIAS, A_BITS,
                             False, A_SPECIALS)
                val = val * pow2(tl.minimum(a_s.to(tl.int32), 254) - 127)[:, :, None]
                a = _to_act_dtype(tl.reshape(val, [BLOCK_M, BLOCK_K]), ACT_KIND, HW_CAST)
            if SPLIT_FP16:
                hi, lo = _split_bf16(a)
                acc = tl.dot_scaled(hi, None, LHS_FMT, w, ws, RHS_FMT, acc=acc, fast_math=FAST)
                acc = tl.dot_scaled(lo, None, LHS_FMT, w, ws, RHS_FMT, acc=acc, fast_math=FAST)
            else:
                acc = tl.dot_scaled(a, None, LHS_FMT, w, ws, RHS_FMT, acc=acc, fast_math=FAST)
        a_ptrs += A_BYTES
        as_ptrs += NB
        w_ptrs += BLOCK_K // RHS_PACK
        ws_ptrs += NB
    if HAS_BIAS:
        acc += load_fp32(bias_ptr + offs_n, n_ok, BIAS_KIND)[None, :]
    nan_mask = (row_nan[:, None] + col_nan[None, :]) > 0
    acc = tl.where(nan_mask, nan_like(nan_mask.to(tl.int32)), acc)
    out_ptrs = out_ptr + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    store_fp32(out_ptrs, acc, m_ok[:, None] & n_ok[None, :], OUT_KIND, HW_CAST)


@dataclass(frozen=True)
class _WeightOperands:
    """The weight as dot_scaled reads it, made once by `finish_prepare`."""

    data: Tensor  # uint8 [N, K / 2] (e2m1 packed, low nibble first) or [N, K] (fp8 codes)
    scales: Tensor  # uint8 [N, K / 32], E8M0
    fmt: str  # dot_scaled's name of the weight format
    fp16_exact: bool  # every code * 2**E of this weight is exact in fp16: fp16 compute is safe
    inf_codes: tuple[Tensor, Tensor, Tensor] | None = None  # (n, k, +-inf fp32) moved out


def without_special_codes(fmt: str, data: Tensor, scales: Tensor
                          ) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor] | None]:
    """(data, scales, inf_codes) with no Inf / NaN element code left for dot_scaled (see the
    module docstring): a NaN code's block gets scale 0xFF, a +-Inf code becomes 0 and is listed
    as (n index, k index, +-inf). One-byte codes only (mxfp4 has no special codes)."""
    specials = get_format(fmt).specials
    if specials == "none":
        return data, scales, None
    mag = data & 0x7F
    nan = mag == 0x7F if specials == "nan_only_all_ones" else mag > 0x7C
    inf = mag == 0x7C if specials == "ieee" else torch.zeros_like(nan)
    if not bool((nan | inf).any()):
        return data, scales, None
    n_nan, k_nan = nan.nonzero(as_tuple=True)
    scales = scales.clone()
    scales[n_nan, k_nan // 32] = E8M0_NAN
    n_inf, k_inf = inf.nonzero(as_tuple=True)
    sign = torch.where(data[n_inf, k_inf] >= 0x80, -1.0, 1.0).to(device=data.device)
    infs = (n_inf, k_inf, sign * float("inf")) if n_inf.numel() else None
    return data.masked_fill(nan | inf, 0), scales, infs


def _add_inf_codes(out32: Tensor, lhs_values: Tensor, infs: tuple[Tensor, Tensor, Tensor]) -> None:
    """out32[:, n] += lhs[:, k] * (+-Inf) for each moved-out code: IEEE fp32, so a 0 or NaN lhs
    value gives NaN and opposite infinities cancel to NaN, as in the reference's matmul."""
    cols, ks, vals = infs
    out32.index_add_(1, cols, lhs_values[:, ks].to(torch.float32) * vals)


def fp16_exact_scale_range(fmt: str) -> tuple[int, int]:
    """(lowest, highest) scale byte whose block values code * 2**E are all exact in fp16: the
    largest code * 2**E <= 65504 and the smallest code step * 2**E >= 2**-24."""
    elem = get_format(fmt)
    e_lo = -24 - int(math.log2(elem.min_subnormal))  # a power of two: log2 is exact
    e_hi = math.floor(math.log2(65504.0 / elem.max_normal))
    assert elem.max_normal * 2.0**e_hi <= 65504.0 < elem.max_normal * 2.0 ** (e_hi + 1)
    return e_lo + E8M0_BIAS, e_hi + E8M0_BIAS


def _pack_fp4(codes: Tensor) -> Tensor:
    """[N, K] fp4 codes (one a byte) -> [N, K / 2] bytes, element 2i in the low nibble."""
    return (codes[:, 0::2] & 0xF) | ((codes[:, 1::2] & 0xF) << 4)


class DotScaledLinear(LinearKernel):
    """MX linear on `tl.dot_scaled` (see the module docstring for the numerics)."""

    name = NAME
    weight_layout = None  # the formats' defaults: mxfp4 packed, mxfp8 one code a byte

    def finish_prepare(self, prepared: PreparedWeight) -> None:
        w = prepared.weight
        data = _pack_fp4(w.data) if w.fmt == "mxfp4" and w.layout == "unpacked" else w.data
        data, scales, infs = without_special_codes(w.fmt, data, w.scales)
        scales = scales.contiguous()
        lo, hi = fp16_exact_scale_range(w.fmt)
        exact = ((scales >= lo) & (scales <= hi)) | (scales == E8M0_NAN)  # NaN: masked anyway
        prepared.cache[CACHE_KEY] = _WeightOperands(
            data.contiguous(), scales, DOT_FORMAT[w.fmt], bool(exact.all()), infs)

    def apply(self, x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None) -> Tensor:
        check_input(x, prepared, NAME)
        out = dot_scaled_linear(x.reshape(-1, prepared.in_features), prepared, bias)
        return out.view(*x.shape[:-1], prepared.out_features)


@functools.lru_cache(maxsize=None)
def _native_mx(device_type: str, index: int | None) -> bool:
    """Does dot_scaled run an MX lhs on MX tensor cores here (the declaration's native_on)?"""
    if device_type != "cuda":
        return False
    props = torch.cuda.get_device_properties(index if index is not None else 0)
    if getattr(torch.version, "hip", None):
        platform = Platform("rocm", props.gcnArchName.split(":")[0])
    else:
        platform = Platform("cuda", f"sm{props.major * 10 + props.minor}")
    return KERNELS_BY_NAME[NAME].is_native_on(platform)


def default_lhs_mode(key: QuantKey | None, dtype: torch.dtype, device: torch.device) -> str:
    """The lhs mode `dot_scaled_linear` uses: weight-only "x"; "decoded" for fp16 x (its QDQ
    rounds to fp16) and where an MX lhs would only be emulated; else "mx" (the interpreter runs
    dot_scaled's own MX lhs path)."""
    if key is None:
        return "x"
    if dtype == torch.float16:
        return "decoded"
    return "mx" if _INTERPRETED or _native_mx(device.type, device.index) else "decoded"


def _operands(prepared: PreparedWeight) -> _WeightOperands:
    ops = prepared.cache.get(CACHE_KEY)
    if ops is None:
        raise ValueError(f"{NAME}: this PreparedWeight was not made by {NAME}.prepare (its cache "
                         f"has no {CACHE_KEY!r} entry); prepare the weight with this kernel")
    return ops


def _check_args(x2d: Tensor, key: QuantKey | None, bias: Tensor | None, n: int,
                out_dtype: torch.dtype, lhs_mode: str) -> None:
    if x2d.dtype not in ACT_DTYPES:
        raise ValueError(f"{NAME}: input dtype {x2d.dtype} is not bfloat16 or float16 (the "
                         "dtypes tl.dot_scaled takes); cast x to bfloat16")
    if not _INTERPRETED and not x2d.is_cuda:
        raise ValueError(f"{NAME}: input is on {x2d.device}; the Triton kernel needs a CUDA / ROCm "
                         "tensor (or TRITON_INTERPRET=1 set before importing kernels.triton)")
    if key is not None and (key.static or key.format not in DOT_FORMAT):
        raise ValueError(f"{NAME}: activation key {key} is not a dynamic {'/'.join(DOT_FORMAT)} "
                         "key; resolve the scheme again")
    if (lhs_mode == "x") != (key is None) or lhs_mode not in LHS_MODES:
        want = '"x"' if key is None else '"mx" or "decoded"'
        raise ValueError(f"{NAME}: lhs_mode {lhs_mode!r} does not fit activation key {key}; "
                         f"use {want} (or None for the default)")
    if out_dtype not in KIND_OF_DTYPE:
        raise ValueError(f"{NAME}: out_dtype {out_dtype} is not float32, bfloat16 or float16")
    if bias is None:
        return
    if not isinstance(bias, Tensor) or bias.shape != (n,) or bias.dtype not in KIND_OF_DTYPE:
        got = (f"{bias.dtype} {tuple(bias.shape)}" if isinstance(bias, Tensor)
               else type(bias).__name__)
        raise ValueError(f"{NAME}: bias must be a float32/bfloat16/float16 tensor of shape ({n},), "
                         f"got {got}")
    if bias.device != x2d.device:
        raise ValueError(f"{NAME}: bias on {bias.device} but input on {x2d.device}; move them to "
                         "one device")


def dot_scaled_linear(x2d: Tensor, prepared: PreparedWeight, bias: Tensor | None = None,
                      out_dtype: torch.dtype | None = None, lhs_mode: str | None = None) -> Tensor:
    """x2d [M, K] bf16 / fp16 -> [M, N] in out_dtype (default x2d's dtype; float32 returns the
    fp32 accumulator, for tests). lhs_mode: one of LHS_MODES, None for `default_lhs_mode`."""
    ops = _operands(prepared)
    key = prepared.contract.activation
    m, k = x2d.shape
    n = prepared.out_features
    out_dtype = x2d.dtype if out_dtype is None else out_dtype
    lhs_mode = default_lhs_mode(key, x2d.dtype, x2d.device) if lhs_mode is None else lhs_mode
    _check_args(x2d, key, bias, n, out_dtype, lhs_mode)
    if ops.inf_codes is not None and m and out_dtype != torch.float32:
        out32 = dot_scaled_linear(x2d, prepared, bias, torch.float32, lhs_mode)
        return out32.to(out_dtype)  # one RNE cast, as the kernel's own store
    out = torch.empty((m, n), dtype=out_dtype, device=x2d.device)
    if m == 0:
        return out
    x2d = x2d if x2d.stride(1) == 1 else x2d.contiguous()
    x_fmt = "bf16" if x2d.dtype == torch.bfloat16 else "fp16"
    consts = dict(A_MBITS=0, A_BIAS=0, A_BITS=8, A_SPECIALS=0, A_PACK=0, LHS_FMT=x_fmt)
    if key is None:
        lhs = lhs_scale = x2d
    else:
        elem = get_format(key.format)
        lhs, lhs_scale = mx_quant.quantize(x2d, elem, key.scale.rounding)
        consts.update(A_MBITS=elem.mbits, A_BIAS=elem.bias, A_BITS=elem.bits,
                      A_SPECIALS=SPECIALS_CODE[elem.specials], A_PACK=int(elem.bits == 4))
        if lhs_mode == "mx":
            consts["LHS_FMT"] = DOT_FORMAT[key.format]
    split = consts["LHS_FMT"] == "fp16" and not ops.fp16_exact
    if split:
        consts["LHS_FMT"] = "bf16"
    block_m, block_n, block_k, warps, stages = TILE_SMALL_M if m <= SMALL_M else TILE_LARGE_M
    block_k = block_k if k % block_k == 0 else 64  # 64: the declared k_multiple
    if k % block_k:
        raise ValueError(f"{NAME}: in_features {k} is not a multiple of {block_k}; pad the layer")
    has_bias = bias is not None

    def run(cfg: TileConfig) -> None:
        grid = (triton.cdiv(m, cfg.bm), triton.cdiv(n, cfg.bn))
        _dot_scaled_linear_kernel[grid](
            lhs, lhs_scale, ops.data, ops.scales, mx_quant.bits_view(bias) if has_bias else out,
            mx_quant.bits_view(out), m, n, k, lhs.stride(0), lhs_scale.stride(0),
            ops.data.stride(0), ops.scales.stride(0), out.stride(0),
            LHS_MODE=LHS_MODES[lhs_mode], RHS_FMT=ops.fmt, RHS_PACK=2 if ops.fmt == "e2m1" else 1,
            ACT_KIND=KIND_OF_DTYPE[x2d.dtype], SPLIT_FP16=split, HAS_BIAS=has_bias,
            BIAS_KIND=KIND_OF_DTYPE[bias.dtype] if has_bias else KIND_FP32,
            OUT_KIND=KIND_OF_DTYPE[out_dtype], HW_CAST=not _INTERPRETED, FAST=FAST_MATH,
            BLOCK_M=cfg.bm, BLOCK_N=cfg.bn, BLOCK_K=cfg.bk, num_warps=cfg.warps,
            num_stages=cfg.stages, **consts)

    spec = (x2d.device.index, lhs_mode, x2d.dtype, out_dtype, split, has_bias, ops.fmt,
            tuple(sorted(consts.items())))
    fit.launch_fitting(NAME, spec, TileConfig(block_m, block_n, block_k, warps, stages), run,
                       lambda cfg: fit.smaller_configs(
                           cfg, stages="stages", blocks=(("bk", 64), ("bn", 16), ("bm", 16))))
    if ops.inf_codes is not None:  # out is fp32 here (see above)
        lhs_values = x2d if key is None else activation_qdq(key, backend="triton-qdq")(x2d, None)
        _add_inf_codes(out, lhs_values, ops.inf_codes)
    return out


__all__ = ["DotScaledLinear", "dot_scaled_linear", "default_lhs_mode", "fp16_exact_scale_range",
           "without_special_codes", "DOT_FORMAT", "LHS_MODES"]
