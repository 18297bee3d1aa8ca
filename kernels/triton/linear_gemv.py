"""The M = 1 strategy of `triton-emulation` for mxfp4 weights ("gemv"): CUDA-core FMAs on the
32-bit word layout, no tensor cores and no shared-memory round trip of the decoded weight.

Why: with one activation row the tensor-core kernel (linear_mma.py) spends most of its time
moving the decoded bf16 tile through shared memory (H200, ncu: L1/TEX 71 % busy, DRAM 32 %).
Here each weight code goes from the loaded word straight into one FMA:
- a code j of word w (fp4_word_layout) becomes fp32 fields value * 2**-126 in a shift, an
  arithmetic shift and a mask (an e2m1 subnormal lands on an fp32 subnormal, exactly);
- the activation block of 32 is pre-scaled by 2**g (g = min(126 - floor(log2 max|x|), 127)),
  so fields * x' is a normal fp32 number (no precision lost to fp32 subnormals);
- the 32 products of a block are summed, then multiplied by 2**(126 - g) and the block scale
  2**(E - 127) (two exact power-of-two multiplies; 0xFF: NaN): ~4 operations per weight code.
Split-K and the in-kernel deterministic reduction are linear_mma's (the last slice of an
output tile adds the partials in slice order).

Numerics: fp32 accumulation of exact products (a product underflows only for an activation
2**-20 below its block's largest, a contribution far below the GEMM tolerance); the
activation is the dispatcher's QDQ output, computed in the kernel (mx_tiles.act_tile), so only
summation order and those underflows differ from `reference-emulation`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import triton
import triton.language as tl
from torch import Tensor

from kernels.triton import launcher
from kernels.triton.fit import k_slices
from kernels.triton.fp4_words import fp4_words, tiled_fp4
from kernels.triton.linear_mma import workspace
from kernels.triton.mx_codec import e8m0_value, pow2, store_fp32
from kernels.triton.mx_tiles import act_tile


@triton.jit
def _field(words, SHIFT: tl.constexpr):
    """fp32 value * 2**-126 of the code whose nibble ends SHIFT bits below bit 32."""
    if SHIFT == 0:
        f = (words >> 6) & -2118123520
    else:
        f = ((words << SHIFT) >> 6) & -2118123520
    return f.to(tl.float32, bitcast=True)


@triton.jit
def _split8(v, NW: tl.constexpr):
    """[NW * 8] -> eight [NW] vectors, element 8w + j in vector j."""
    a = tl.reshape(v, [NW, 2, 2, 2])
    c0, c1 = tl.split(a)  # j & 1
    b00, b01 = tl.split(c0)  # (j >> 1) & 1
    b10, b11 = tl.split(c1)
    x0, x4 = tl.split(b00)
    x2, x6 = tl.split(b01)
    x1, x5 = tl.split(b10)
    x3, x7 = tl.split(b11)
    return x0, x1, x2, x3, x4, x5, x6, x7


@triton.jit(do_not_specialize=["TILES_PER_SPLIT"])
def _gemv_fp4_kernel(x_ptr, w_ptr, s_ptr, a_scale_ptr, bias_ptr, out_ptr, part_ptr, lock_ptr,
                     N, K, TILES_PER_SPLIT, IN_KIND: tl.constexpr, OUT_KIND: tl.constexpr,
                     HAS_BIAS: tl.constexpr, HW_CAST: tl.constexpr, SPLIT: tl.constexpr,
                     ACT_MODE: tl.constexpr, A_MBITS: tl.constexpr, A_BIAS: tl.constexpr,
                     A_EMAX: tl.constexpr, A_MAX_NORMAL: tl.constexpr,
                     A_MAXN_MANT: tl.constexpr, A_MAXN_SUB: tl.constexpr,
                     A_IS_INT: tl.constexpr, A_ROUNDING: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tl.static_assert(BLOCK_K % 32 == 0, "BLOCK_K must hold whole 32-element MX blocks")
    NW: tl.constexpr = BLOCK_K // 8
    NB: tl.constexpr = BLOCK_K // 32
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    k_tiles = K // BLOCK_K
    k_lo = pid_s * TILES_PER_SPLIT
    k_hi = tl.minimum(k_lo + TILES_PER_SPLIT, k_tiles)
    r = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for kk in range(k_lo, k_hi):
        tile = (pid_n * k_tiles + kk).to(tl.int64)  # tile-major words and scale bytes
        words = tl.load(w_ptr + tile * (BLOCK_N * NW) + r[:, None] * NW
                        + tl.arange(0, NW)[None, :])
        sbyte = tl.load(s_ptr + tile * (BLOCK_N * NB) + r[:, None] * NB
                        + tl.arange(0, NB)[None, :]).to(tl.int32)
        # the activation slice after the contract's QDQ (the dispatcher's bits; the one row is
        # re-quantized by every program: ~10 % of the weight decode's work, one launch less)
        x = tl.reshape(act_tile(x_ptr, K, a_scale_ptr, 1, K, 0, kk, IN_KIND, ACT_MODE, A_MBITS,
                                A_BIAS, A_EMAX, A_MAX_NORMAL, A_MAXN_MANT, A_MAXN_SUB,
                                A_IS_INT, A_ROUNDING, HW_CAST, 1, BLOCK_K), [BLOCK_K])
        # per 32-block pre-scale 2**g: |x'| < 2**128, fields * x' normal
        xb = tl.reshape(x, [NB, 32])
        amax = tl.max((xb.to(tl.int32, bitcast=True) & 0x7FFFFFFF), axis=1)
        e = tl.minimum((amax >> 23) - 127, 127)
        g = tl.where(amax >= 0x7F800000, 0, tl.minimum(126 - e, 127))
        xs = tl.reshape(xb * pow2(g)[:, None], [BLOCK_K])
        x0, x1, x2, x3, x4, x5, x6, x7 = _split8(xs, NW)
        p = _field(words, 28) * x0[None, :]  # element 8w + j sits at nibble WORD_NIBBLE[j]
        p += _field(words, 12) * x1[None, :]
        p += _field(words, 24) * x2[None, :]
        p += _field(words, 8) * x3[None, :]
        p += _field(words, 20) * x4[None, :]
        p += _field(words, 4) * x5[None, :]
        p += _field(words, 16) * x6[None, :]
        p += _field(words, 0) * x7[None, :]
        blk = tl.sum(tl.reshape(p, [BLOCK_N, NB, 4]), axis=2)  # [BLOCK_N, NB]
        blk = blk * pow2(126 - g)[None, :] * e8m0_value(sbyte)  # 2**126 of the fields, 2**-g
        acc += tl.sum(blk, axis=1)
    cols = pid_n * BLOCK_N + r
    if SPLIT > 1:
        base = pid_n * BLOCK_N
        tl.store(part_ptr + pid_s * (tl.num_programs(0) * BLOCK_N) + base + r, acc)
        tl.debug_barrier()
        done = tl.atomic_add(lock_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if done == SPLIT - 1:
            acc = tl.zeros([BLOCK_N], dtype=tl.float32)
            for s in tl.static_range(SPLIT):  # slice order: deterministic
                acc += tl.load(part_ptr + s * (tl.num_programs(0) * BLOCK_N) + base + r,
                               cache_modifier=".cg")
            if HAS_BIAS:
                acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
            store_fp32(out_ptr + cols, acc, cols < N, OUT_KIND, HW_CAST)
            tl.atomic_xchg(lock_ptr + pid_n, 0, sem="relaxed", scope="gpu")
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
        store_fp32(out_ptr + cols, acc, cols < N, OUT_KIND, HW_CAST)


@dataclass(frozen=True)
class GemvConfig:
    block_n: int
    block_k: int
    split: int
    warps: int
    stages: int


@dataclass(frozen=True)
class GemvPlan:
    cfg: GemvConfig
    grid: tuple[int, int]
    per_split: int
    words: Tensor
    scales: Tensor
    act_scale: Optional[Tensor]  # static fp8 activation scale (fp32 [1]), else None
    n: int
    k: int
    tail: tuple
    key: int


def gemv_plan(cached: dict, consts: dict, n: int, k: int, in_kind: int, out_kind: int,
              has_bias: bool, hw_cast: bool, cfg: GemvConfig) -> Optional[GemvPlan]:
    """The plan of an M = 1 call, or None where the word decode does not apply (not packed
    mxfp4, K not a multiple of the K tile, a scale byte past 128, saturation)."""
    while k % cfg.block_k and cfg.block_k > 64:  # a K the tile does not divide: a smaller tile
        cfg = GemvConfig(cfg.block_n, cfg.block_k // 2, cfg.split, cfg.warps, cfg.stages)
    words = fp4_words(cached, consts, k, cfg.block_k)
    if words is None or -(-n // cfg.block_n) > 1024:
        return None
    tw, ts = tiled_fp4(cached, words, cfg.block_n, cfg.block_k)  # linear_mma's tiles too
    split, per_split = k_slices(k // cfg.block_k, cfg.split)
    act = tuple(consts[name] for name in _ACT_NAMES)
    tail = (in_kind, out_kind, has_bias, hw_cast, split) + act + (cfg.block_n, cfg.block_k)
    return GemvPlan(cfg, (-(-n // cfg.block_n), split), per_split, tw, ts, cached["act_scale"],
                    n, k, tail, launcher.intern((tw.device.index, tail, n, k)))


_ACT_NAMES = ("ACT_MODE", "A_MBITS", "A_BIAS", "A_EMAX", "A_MAX_NORMAL", "A_MAXN_MANT",
              "A_MAXN_SUB", "A_IS_INT", "A_ROUNDING")


def run_gemv(plan: GemvPlan, x2d: Tensor, out: Tensor, bias: Optional[Tensor]) -> None:
    """x2d [1, K] (bits view for bf16 / fp32), out [1, N] (bits view likewise)."""
    part, lock = workspace(plan.grid[0] * plan.grid[1] * plan.cfg.block_n, x2d.device)
    b = bias if bias is not None else lock
    a = plan.act_scale if plan.act_scale is not None else lock
    key = (plan.key, launcher.aligned(x2d), launcher.aligned(b), out.dtype, x2d.dtype)
    launcher.launch(_gemv_fp4_kernel, key, plan.grid,
                    (x2d, plan.words, plan.scales, a, b, out, part, lock, plan.n, plan.k,
                     plan.per_split) + plan.tail,
                    num_warps=plan.cfg.warps, num_stages=plan.cfg.stages)


__all__ = ["GemvConfig", "GemvPlan", "gemv_plan", "run_gemv"]
