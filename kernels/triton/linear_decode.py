"""The small-M ("decode") strategy of `triton-emulation`: M <= 16 rows (mxfp4: 64), weight-read
bound.

Why a separate kernel: with a few activation rows the time is the weight read, so each
program owns a stripe of BLOCK_N weight rows (and, with split-K, a slice of K) instead of an
[M, N] output tile: every weight byte is read once, the activation (tiny) is re-read and
re-quantized per program in registers. Two inner products:
  FMA (M == 1): acc[BLOCK_N] += sum_k w * x per K tile — no tensor cores, one fp32 FMA per
      weight element;
  DOT (2 <= M <= 64): out^T = W @ QDQ(x)^T with the weight tile as the dot's left operand
      (the "swap AB" trick: BLOCK_N fills the MMA's 64-row side, the rows of x the other).
Split-K (SPLIT > 1) writes fp32 partials [SPLIT, M, N] that the host sums in a fixed order, so
results are deterministic (no atomics).

Numerics are those of the fused tile kernel (linear_emulation.py): the same activation tile QDQ
(`act_tile`) and weight decode (`weight_tile`), fp32 accumulation; only the summation order
differs from the reference.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernels.triton import launcher
from kernels.triton.fit import k_slices, launch_fitting, smaller_configs
from kernels.triton.mx_codec import e8m0_value, nan_like, pow2, store_fp32
from kernels.triton.mx_tiles import act_tile, weight_tile
from kernels.triton.mx_quant import bits_view


@triton.jit
def _fp4_fields(b, HI: tl.constexpr):
    """fp32 of the low (HI=0) or high nibble of bytes `b` (int32), times 2**-126: the nibble's
    sign lands on bit 31 and its e1 e0 m bits on fp32 bits 24..22 in two shifts and a mask
    (an E2M1 subnormal 0.5 lands on the fp32 subnormal 2**-127: the same 2**-126 factor)."""
    if HI:
        f = ((b << 24) >> 6) & -2118123520  # 0x81C00000: sign + bits 24..22
    else:
        f = ((b << 28) >> 6) & -2118123520
    return f.to(tl.float32, bitcast=True)


@triton.jit
def _fp4_scaled(v, sbyte, FAST_SCALE: tl.constexpr):
    """`_fp4_fields` values v [BLOCK_N, NB, 32] times their blocks' scales (bytes [BLOCK_N, NB]):
    one fp32 multiplier 2**126 * 2**(E - 127) per block when every scale byte of the weight is
    <= 128 (checked once at preparation: `fast_fp4_scale`), else 2**126 then 2**(E - 127);
    0xFF -> NaN."""
    if FAST_SCALE:
        f = tl.where(sbyte == 255, nan_like(sbyte), pow2(tl.minimum(sbyte, 128) - 1))
    else:
        v = v * 8.507059173023462e37  # 2**126
        f = e8m0_value(sbyte)
    return v * f[:, :, None]


@triton.jit
def _fp4_tile(data_ptr, scale_ptr, stride_d, stride_s, N, pid_n, kk, FAST_SCALE: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """An mxfp4 weight tile [BLOCK_N, BLOCK_K] (packed, element 2i in the low nibble) in fp32,
    exact, with ~4 integer / float operations per element instead of the generic decode's ~8;
    K must be a multiple of BLOCK_K (the host checks)."""
    NB: tl.constexpr = BLOCK_K // 32
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_c = tl.minimum(rows, N - 1).to(tl.int64)  # clamped: in bounds, masked at the store
    b = tl.load(data_ptr + rows_c[:, None] * stride_d + kk * (BLOCK_K // 2)
                + tl.arange(0, BLOCK_K // 2)[None, :]).to(tl.int32)
    v = tl.reshape(tl.join(_fp4_fields(b, 0), _fp4_fields(b, 1)), [BLOCK_N, NB, 32])
    sbyte = tl.load(scale_ptr + rows_c[:, None] * stride_s + kk * NB
                    + tl.arange(0, NB)[None, :]).to(tl.int32)
    return tl.reshape(_fp4_scaled(v, sbyte, FAST_SCALE), [BLOCK_N, BLOCK_K])


@triton.jit
def _split_fp4_tile(data_ptr, scale_ptr, stride_d, stride_s, N, pid_n, kk, HI: tl.constexpr,
                    FAST_SCALE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Half of a K tile of an mxfp4 weight in the split layout (`split_fp4_layout`): byte j of
    tile kk holds element j (low nibble) and element BLOCK_K/2 + j (high nibble), so each half
    decodes from one load with no nibble interleave. Values in fp32, exact (0xFF: NaN)."""
    HALF: tl.constexpr = BLOCK_K // 2
    NBH: tl.constexpr = HALF // 32
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_c = tl.minimum(rows, N - 1).to(tl.int64)  # clamped: in bounds, masked at the store
    b = tl.load(data_ptr + rows_c[:, None] * stride_d + kk * HALF + tl.arange(0, HALF)[None, :])
    v = tl.reshape(_fp4_fields(b.to(tl.int32), HI), [BLOCK_N, NBH, 32])
    blk = kk * (2 * NBH) + HI * NBH + tl.arange(0, NBH)
    sbyte = tl.load(scale_ptr + rows_c[:, None] * stride_s + blk[None, :]).to(tl.int32)
    return tl.reshape(_fp4_scaled(v, sbyte, FAST_SCALE), [BLOCK_N, HALF])


@triton.jit
def _decode_linear_kernel(
        x_ptr, w_data_ptr, w_scale_ptr, s_ptr, bias_ptr, out_ptr, M, N, K, TILES_PER_SPLIT,
        stride_x, stride_wd, stride_ws, stride_o, stride_split,
        IN_KIND: tl.constexpr, OUT_KIND: tl.constexpr, HAS_BIAS: tl.constexpr,
        ACT_MODE: tl.constexpr, A_MBITS: tl.constexpr, A_BIAS: tl.constexpr,
        A_EMAX: tl.constexpr, A_MAX_NORMAL: tl.constexpr, A_MAXN_MANT: tl.constexpr,
        A_MAXN_SUB: tl.constexpr, A_IS_INT: tl.constexpr, A_ROUNDING: tl.constexpr,
        W_MBITS: tl.constexpr, W_BIAS: tl.constexpr, W_BITS: tl.constexpr,
        W_IS_INT: tl.constexpr, W_SPECIALS: tl.constexpr, W_PACK: tl.constexpr,
        W_SAT: tl.constexpr,
        DOT_KIND: tl.constexpr, DOT_PRECISION: tl.constexpr, HW_CAST: tl.constexpr,
        USE_DOT: tl.constexpr, SPLIT: tl.constexpr, W_SPLIT: tl.constexpr, ACC2D: tl.constexpr,
        FP4_FAST: tl.constexpr, FAST_SCALE: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tl.static_assert(BLOCK_K % (64 if W_SPLIT else 32) == 0,
                     "BLOCK_K must hold whole 32-element MX blocks (split fp4: in each half)")
    tl.static_assert((BLOCK_M & (BLOCK_M - 1)) == 0, "BLOCK_M must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_N & (BLOCK_N - 1)) == 0, "BLOCK_N must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_K & (BLOCK_K - 1)) == 0, "BLOCK_K must be a power of two (tl.arange)")
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    k_lo = pid_s * TILES_PER_SPLIT
    k_hi = tl.minimum(k_lo + TILES_PER_SPLIT, tl.cdiv(K, BLOCK_K))
    PARTS: tl.constexpr = 2 if W_SPLIT else 1  # the split mxfp4 layout: two half tiles
    PART_K: tl.constexpr = BLOCK_K // PARTS
    if USE_DOT:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    else:
        acc1 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_N, PART_K], dtype=tl.float32)
    for kk in range(k_lo, k_hi):
        for h in tl.static_range(PARTS):
            a = act_tile(x_ptr, stride_x, s_ptr, M, K, 0, PARTS * kk + h, IN_KIND, ACT_MODE,
                         A_MBITS, A_BIAS, A_EMAX, A_MAX_NORMAL, A_MAXN_MANT, A_MAXN_SUB,
                         A_IS_INT, A_ROUNDING, HW_CAST, BLOCK_M, PART_K)
            if W_SPLIT:  # no nibble interleave: each half decodes from one load
                w = _split_fp4_tile(w_data_ptr, w_scale_ptr, stride_wd, stride_ws, N, pid_n,
                                    kk, h, FAST_SCALE, BLOCK_N, BLOCK_K)
            elif FP4_FAST:
                w = _fp4_tile(w_data_ptr, w_scale_ptr, stride_wd, stride_ws, N, pid_n, kk,
                              FAST_SCALE, BLOCK_N, BLOCK_K)
            else:
                w = weight_tile(w_data_ptr, w_scale_ptr, stride_wd, stride_ws, N, K, pid_n,
                                kk, W_MBITS, W_BIAS, W_BITS, W_IS_INT, W_SPECIALS, W_PACK,
                                W_SAT, BLOCK_N, BLOCK_K)
            if USE_DOT:
                if DOT_KIND == 0:
                    acc = tl.dot(w.to(tl.bfloat16), tl.trans(a.to(tl.bfloat16)), acc)
                else:
                    acc = tl.dot(w, tl.trans(a), acc, input_precision=DOT_PRECISION)
            elif ACC2D:  # one FMA per element; rows reduced once, after the loop
                acc2 += w * a
            else:
                acc1 += tl.sum(w * a, axis=1)  # a is [1, PART_K]: broadcast over weight rows
    if not USE_DOT:
        if ACC2D:
            acc1 = tl.sum(acc2, axis=1)
        acc = tl.reshape(acc1, [BLOCK_N, BLOCK_M])
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output features (acc's rows)
    rows = tl.arange(0, BLOCK_M)  # activation rows (acc's columns)
    mask = (cols < N)[:, None] & (rows < M)[None, :]
    if SPLIT == 1:
        if HAS_BIAS:
            acc = acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[:, None]
        store_fp32(out_ptr + rows.to(tl.int64)[None, :] * stride_o + cols[:, None], acc, mask,
                   OUT_KIND, HW_CAST)
    else:  # fp32 partial of this K slice; the host adds the slices in order
        ptrs = out_ptr + pid_s * stride_split + rows.to(tl.int64)[None, :] * stride_o
        tl.store(ptrs + cols[:, None], acc, mask=mask)


@dataclass(frozen=True)
class DecodeConfig:
    block_n: int
    block_k: int
    split: int  # K slices (1: no split-K)
    warps: int
    stages: int
    split_fp4: bool = False  # mxfp4: read the split layout (split_fp4_layout) where K allows
    acc2d: bool = False  # M == 1: a [BLOCK_N, BLOCK_K] accumulator, rows reduced at the end
    fast_fp4: bool = True  # mxfp4: the short decode (`_fp4_tile`) where K allows (H200: 12-17 %)


def split_fp4_layout(data: Tensor, block_k: int) -> Tensor:
    """Packed mxfp4 codes [N, K/2] (element 2j low nibble, 2j+1 high) -> the split layout for
    K tiles of block_k: byte j of a tile holds elements j (low) and block_k/2 + j (high).
    A permutation of K inside each tile only (the scales keep their 32-element blocks)."""
    n, half_k = data.shape
    k = 2 * half_k
    if k % block_k:
        raise ValueError(f"split_fp4_layout: K={k} is not a multiple of the tile {block_k}")
    codes = torch.stack((data & 0xF, data >> 4), dim=-1).reshape(n, k // block_k, block_k)
    lo, hi = codes[..., : block_k // 2], codes[..., block_k // 2:]
    return (lo | (hi << 4)).reshape(n, half_k).contiguous()


def default_config(m: int, weight_bits: int, interpreted: bool) -> DecodeConfig:
    """The measured choice (docs/benchmarks.md); small tiles under the interpreter."""
    if interpreted:
        return DecodeConfig(block_n=16, block_k=64, split=2, warps=1, stages=1)
    if m == 1:
        return GPU_FMA_CONFIG_8BIT if weight_bits == 8 else GPU_FMA_CONFIG
    return {4: GPU_DOT_CONFIG_FP4, 8: GPU_DOT_CONFIG_8BIT}.get(weight_bits, GPU_FMA_CONFIG)


def decode_max_m(weight_bits: int) -> int:
    """Up to how many rows the decode strategy beats dequant-gemm (H200, both shapes measured:
    mxfp4 up to M = 64, e.g. 73 vs 90 us at N = K = 8192; 8-bit weights only to M = 16)."""
    return 64 if weight_bits == 4 else 16


# H200, triton 3.6, 2026-11-29 (tools/tune_linear.py; docs/benchmarks.md has the sweeps).
# M = 1: of 16 configs at N x K = 8192 x 8192 and 28672 x 8192 these were fastest or within a
# few percent on both shapes; 8-bit weights gain ~20 % from the 2-D accumulator.
GPU_FMA_CONFIG = DecodeConfig(block_n=32, block_k=512, split=1, warps=4, stages=3)
GPU_FMA_CONFIG_8BIT = DecodeConfig(block_n=16, block_k=512, split=1, warps=4, stages=3,
                                   acc2d=True)
# 2 <= M <= 64 (tensor cores): mxfp4 in the split layout with split-K 2 (M = 16: 47 / 137 us
# against 50 / 189 us for the best interleaved config); 8-bit weights prefer split-K 4.
GPU_DOT_CONFIG_FP4 = DecodeConfig(block_n=64, block_k=256, split=2, warps=4, stages=3,
                                  split_fp4=True)
GPU_DOT_CONFIG_8BIT = DecodeConfig(block_n=64, block_k=256, split=4, warps=4, stages=3)


def fast_fp4_scale(scales: Tensor) -> bool:
    """Whether every finite block scale byte is <= 128 (2**1), so 2**126 * 2**(E - 127) fits one
    fp32 multiplier (`_fp4_factor`); true of any real weight (|w| <= 6 * 2 per block)."""
    finite = scales[scales != 255]
    return bool(finite.numel() == 0 or int(finite.max()) <= 128)


def checked_once(cached: dict, name: str, check: Callable[[], bool]) -> bool:
    """A per-weight check (a device sync: never per call) run once and kept in `cached`."""
    ok = cached.get(name)
    return ok if ok is not None else cached.setdefault(name, check())


def fp4_scale_fits(cached: dict) -> bool:
    """`fast_fp4_scale` of a prepared weight, checked once; the decode, the 32-bit words (mma,
    gemv) and the wgmma layout all ask it."""
    return checked_once(cached, "fast_fp4_scale", lambda: fast_fp4_scale(cached["scales"]))


def launch_decode(x2d: Tensor, out: Tensor, cached: dict, bias: Tensor | None, consts: dict,
                  dot_kind: int, precision: str, hw_cast: bool, in_kind: int, out_kind: int,
                  config: DecodeConfig, remember: dict | None = None) -> Tensor:
    """Run the decode kernel for x2d [M <= 64, K] into `out` [M, N] (x's dtype or fp32), with
    `config` or the largest smaller one that fits the device's shared memory (kernels.triton.fit:
    e.g. fp32 activations at M = 64 need half the K tile of bf16 ones on an H200). `remember`:
    a dict that an M = 1, split-K 1 launch fills for `run_remembered`."""
    m = x2d.shape[0]
    key = (x2d.device.index, max(16, triton.next_power_of_2(m)) if m > 1 else 1, in_kind,
           out_kind, dot_kind, precision, bias is not None, tuple(sorted(consts.items())))
    launch_fitting("triton-emulation decode", key, config,
                   lambda cfg: _launch_decode(x2d, out, cached, bias, consts, dot_kind, precision,
                                              hw_cast, in_kind, out_kind, cfg, remember),
                   lambda cfg: smaller_configs(cfg, stages="stages",
                                               blocks=(("block_k", 64), ("block_n", 16))))
    return out


def run_remembered(x2d: Tensor, out: Tensor, bias: Tensor | None, plan: dict) -> None:
    """One M = 1 launch with what `launch_decode(..., remember=plan)` kept from its first call
    (the fitted config, constexprs, weight tensors): no per-call set-up but the pointers.
    out: the output dtype's bits view (bf16 -> int16), as launch_decode takes it."""
    xb = bits_view(x2d)
    b = bias if bias is not None else plan["scales"]
    key = (plan["key"], launcher.aligned(xb), x2d.stride(0) % 16 == 0, launcher.aligned(b),
           out.dtype)
    launcher.launch(_decode_linear_kernel, key, plan["grid"],
                    (xb, plan["data"], plan["scales"], plan["s"], b, out, 1, plan["n"],
                     plan["k"], plan["per_split"], x2d.stride(0), plan["data"].stride(0),
                     plan["scales"].stride(0), out.stride(-2), 0) + plan["tail"],
                    num_warps=plan["warps"], num_stages=plan["stages"])


def _launch_decode(x2d: Tensor, out: Tensor, cached: dict, bias: Tensor | None, consts: dict,
                   dot_kind: int, precision: str, hw_cast: bool, in_kind: int, out_kind: int,
                   config: DecodeConfig, remember: dict | None = None) -> None:
    m, k = x2d.shape
    n = out.shape[1]
    data, scales = cached["data"], cached["scales"]
    scale = cached["act_scale"]
    split, per_split = k_slices(launcher.cdiv(k, config.block_k), config.split)
    use_dot = m > 1
    block_m = max(16, triton.next_power_of_2(m)) if use_dot else 1
    # the short fp4 decodes do not saturate: a weight that may pass fp32's max takes the generic
    packed_fp4 = (consts["W_PACK"] == 1 and consts["W_BITS"] == 4 and k % config.block_k == 0
                  and not consts["W_SAT"])
    w_split = config.split_fp4 and packed_fp4
    fp4_fast = config.fast_fp4 and packed_fp4 and not w_split
    fast_scale = packed_fp4 and fp4_scale_fits(cached)
    if w_split:
        key = f"decode_split_fp4_{config.block_k}"
        data = cached.get(key)
        if data is None:
            data = cached.setdefault(key, split_fp4_layout(cached["data"], config.block_k))
    target = bits_view(out)
    if split > 1:
        target = torch.empty((split, m, n), dtype=torch.float32, device=x2d.device)
    grid = (launcher.cdiv(n, config.block_n), split)
    head = (bits_view(x2d), data, scales, scale if scale is not None else scales,
            bias if bias is not None else scales, target, m, n, k, per_split,
            x2d.stride(0), data.stride(0), scales.stride(0), target.stride(-2),
            target.stride(0) if split > 1 else 0)
    named = dict(IN_KIND=in_kind, OUT_KIND=out_kind, HAS_BIAS=bias is not None,
                 DOT_KIND=dot_kind, DOT_PRECISION=precision, HW_CAST=hw_cast, USE_DOT=use_dot,
                 SPLIT=split, W_SPLIT=w_split, ACC2D=config.acc2d and not use_dot,
                 FP4_FAST=fp4_fast, FAST_SCALE=fast_scale,
                 BLOCK_M=block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, **consts)
    tail = tuple(named[name] for name in _decode_linear_kernel.arg_names[len(head):])
    launcher.launch_auto(_decode_linear_kernel, grid, head + tail, num_warps=config.warps,
                         num_stages=config.stages)
    if remember is not None and split == 1 and m == 1:  # what `run_remembered` needs
        remember.update(grid=grid, tail=tail, data=data, scales=scales, s=head[3], n=n, k=k,
                        per_split=per_split, warps=config.warps, stages=config.stages,
                        key=launcher.intern((x2d.device.index, tail, data.stride(0),
                                             scales.stride(0), n, k, per_split)))
    if split > 1:
        total = target.sum(dim=0)  # a fixed-order reduction: deterministic
        if bias is not None:
            total += bias
        out.copy_(total)  # one RNE cast to the output dtype
