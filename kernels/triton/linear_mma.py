"""The tensor-core strategy of `triton-emulation` for every M ("mma"): out^T = W @ QDQ(x)^T.

Why: a W4A16 layer is fast only if the weight is read once, decoded in few instructions and fed
to the tensor cores without a detour. This kernel
- puts the weight on the MMA's wide side ("swap AB"): BLOCK_N weight rows fill the 64-row
  side of Hopper's wgmma, the M activation rows (1..BLOCK_M) the narrow side, so M = 1..64 runs
  on tensor cores like large M does;
- decodes mxfp4 from 32-bit words (fp4_words.py: made once at prepare, 8 codes per word in the
  order the decoder emits them, tile-major), two codes per instruction as bf16x2 in PTX:
  an e2m1 nibble shifted into a bf16's low exponent / mantissa bits reads as value * 2**-126
  (an e2m1 subnormal lands on a bf16 subnormal), and one bf16x2 multiply by 2**126 * 2**(E-127)
  fixes the bias and applies the block scale at once (exact: a power of two; E <= 128, checked
  at prepare). Other formats use the generic exact decode (mx_tiles.weight_tile);
- splits K over SPLIT programs when N / BLOCK_N alone cannot fill the GPU; the last program of
  an output tile to finish (an atomic counter per tile, reset by that program) adds the fp32
  partials in slice order, adds the bias and stores: one launch, deterministic, CUDA-graph safe.

Numerics: those of the other emulation strategies (linear_tiles.py docstring): the activation
tile is the dispatcher's QDQ bit for bit (`act_tile`), the weight values exact, fp32
accumulation; only the summation order differs from `reference-emulation`. Under
TRITON_INTERPRET=1 the word decode runs as plain integer / fp32 Triton (fp4_words.py, the same
values; inline PTX does not interpret) and the dot takes fp32 operands.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.runtime import driver

from kernels.triton import launcher
from kernels.triton.fit import k_slices
from kernels.triton.fp4_words import fp4_word_tile, fp4_words, tiled_fp4
from kernels.triton.launcher import aligned
from kernels.triton.mx_codec import e8m0_value, nan_like, store_fp32
from kernels.triton.mx_tiles import act_tile, weight_tile

@triton.jit
def _fp8_tile(data_ptr, scale_ptr, stride_d, stride_s, N, pid_n, kk, E5: tl.constexpr,
              HW: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """An mxfp8 weight tile [BLOCK_N, BLOCK_K] in fp32 through the hardware fp8 convert (two
    codes an instruction) times the block scales, exact (no saturation: the host checks);
    K % BLOCK_K == 0. The interpreter's fp8 convert gets the special codes wrong (E4M3 NaN
    reads 480, E5M2 Inf / NaN read 2**16 ...): without HW they are set from the bits."""
    NB: tl.constexpr = BLOCK_K // 32
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_c = tl.minimum(rows, N - 1).to(tl.int64)  # clamped: in bounds, masked at the store
    c = tl.load(data_ptr + rows_c[:, None] * stride_d + kk * BLOCK_K + tl.arange(0, BLOCK_K)[None, :])
    if E5:
        v = c.to(tl.float8e5, bitcast=True).to(tl.float32)
    else:
        v = c.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    if not HW:
        ci = c.to(tl.int32)
        if E5:
            special = ((ci & 0x7C) == 0x7C)
            bits = ((ci & 0x80) << 24) | 0x7F800000 | ((ci & 3) << 21)
            v = tl.where(special, bits.to(tl.float32, bitcast=True), v)
        else:
            v = tl.where((ci & 0x7F) == 0x7F, nan_like(ci), v)
    sbyte = tl.load(scale_ptr + rows_c[:, None] * stride_s + kk * NB
                    + tl.arange(0, NB)[None, :]).to(tl.int32)
    v = tl.reshape(v, [BLOCK_N, NB, 32]) * e8m0_value(sbyte)[:, :, None]
    return tl.reshape(v, [BLOCK_N, BLOCK_K])


@triton.jit(do_not_specialize=["M", "TILES_PER_SPLIT"])
def _mma_linear_kernel(
        x_ptr, w_data_ptr, w_scale_ptr, s_ptr, bias_ptr, out_ptr, part_ptr, lock_ptr,
        M, N, K, TILES_PER_SPLIT, stride_x, stride_wd, stride_ws, stride_o,
        IN_KIND: tl.constexpr, OUT_KIND: tl.constexpr, HAS_BIAS: tl.constexpr,
        ACT_MODE: tl.constexpr, A_MBITS: tl.constexpr, A_BIAS: tl.constexpr,
        A_EMAX: tl.constexpr, A_MAX_NORMAL: tl.constexpr, A_MAXN_MANT: tl.constexpr,
        A_MAXN_SUB: tl.constexpr, A_IS_INT: tl.constexpr, A_ROUNDING: tl.constexpr,
        W_MBITS: tl.constexpr, W_BIAS: tl.constexpr, W_BITS: tl.constexpr,
        W_IS_INT: tl.constexpr, W_SPECIALS: tl.constexpr, W_PACK: tl.constexpr,
        W_SAT: tl.constexpr,
        DOT_KIND: tl.constexpr, DOT_PRECISION: tl.constexpr, HW_CAST: tl.constexpr,
        WORDS: tl.constexpr, ASM: tl.constexpr, TILED: tl.constexpr, FP8: tl.constexpr,
        RAW_OUT: tl.constexpr, RAW_X: tl.constexpr, SPLIT: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tl.static_assert(BLOCK_K % 32 == 0, "BLOCK_K must hold whole 32-element MX blocks")
    tl.static_assert((BLOCK_M & (BLOCK_M - 1)) == 0, "BLOCK_M must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_N & (BLOCK_N - 1)) == 0, "BLOCK_N must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_K & (BLOCK_K - 1)) == 0, "BLOCK_K must be a power of two (tl.arange)")
    tl.static_assert(not ASM or DOT_KIND == 0, "the PTX decode feeds bf16 dots only")
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_s = tl.program_id(2)
    k_lo = pid_s * TILES_PER_SPLIT
    k_hi = tl.minimum(k_lo + TILES_PER_SPLIT, tl.cdiv(K, BLOCK_K))
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # activation rows (acc's columns)
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for kk in range(k_lo, k_hi):
        if RAW_X:  # bf16 x as it is (no QDQ): straight into the bf16 dot
            cols = kk * BLOCK_K + tl.arange(0, BLOCK_K)
            a = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :],
                        mask=(rows < M)[:, None] & (cols < K)[None, :], other=0.0)
        else:
            a = act_tile(x_ptr, stride_x, s_ptr, M, K, pid_m, kk, IN_KIND, ACT_MODE, A_MBITS,
                         A_BIAS, A_EMAX, A_MAX_NORMAL, A_MAXN_MANT, A_MAXN_SUB, A_IS_INT,
                         A_ROUNDING, HW_CAST, BLOCK_M, BLOCK_K)
        if WORDS:
            w = fp4_word_tile(w_data_ptr, w_scale_ptr, stride_wd, stride_ws, N, K, pid_n, kk,
                               ASM, TILED, BLOCK_N, BLOCK_K)
        elif FP8:
            w = _fp8_tile(w_data_ptr, w_scale_ptr, stride_wd, stride_ws, N, pid_n, kk,
                          W_SPECIALS == 2, HW_CAST, BLOCK_N, BLOCK_K)
        else:
            w = weight_tile(w_data_ptr, w_scale_ptr, stride_wd, stride_ws, N, K, pid_n, kk,
                            W_MBITS, W_BIAS, W_BITS, W_IS_INT, W_SPECIALS, W_PACK, W_SAT,
                            BLOCK_N, BLOCK_K)
        if DOT_KIND == 0:
            acc = tl.dot(w.to(tl.bfloat16), tl.trans(a.to(tl.bfloat16)), acc)
        else:
            acc = tl.dot(w.to(tl.float32), tl.trans(a), acc, input_precision=DOT_PRECISION)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output features (acc's rows)
    mask = (cols < N)[:, None] & (rows < M)[None, :]
    offs = rows.to(tl.int64)[None, :] * stride_o + cols[:, None]
    if SPLIT > 1:  # park the partial; the last slice of this tile to finish adds them up
        tile = pid_m * tl.num_programs(0) + pid_n
        tile_elems = tl.num_programs(1) * tl.num_programs(0) * BLOCK_N * BLOCK_M
        local = (tl.arange(0, BLOCK_N)[:, None] * BLOCK_M + tl.arange(0, BLOCK_M)[None, :])
        tl.store(part_ptr + pid_s * tile_elems + tile * (BLOCK_N * BLOCK_M) + local, acc)
        tl.debug_barrier()
        done = tl.atomic_add(lock_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if done == SPLIT - 1:
            acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
            for s in tl.static_range(SPLIT):  # slice order: deterministic
                acc += tl.load(part_ptr + s * tile_elems + tile * (BLOCK_N * BLOCK_M) + local,
                               cache_modifier=".cg")
            if HAS_BIAS:
                acc = acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[:, None]
            if RAW_OUT:  # bf16 out as it is: the GPU's RNE convert
                tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
            else:
                store_fp32(out_ptr + offs, acc, mask, OUT_KIND, HW_CAST)
            tl.atomic_xchg(lock_ptr + tile, 0, sem="relaxed", scope="gpu")  # ready for the next call
    else:
        if HAS_BIAS:
            acc = acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[:, None]
        if RAW_OUT:
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        else:
            store_fp32(out_ptr + offs, acc, mask, OUT_KIND, HW_CAST)


@dataclass(frozen=True)
class MmaConfig:
    block_m: int
    block_n: int
    block_k: int
    split: int  # K slices (1: none)
    warps: int
    stages: int
    maxnreg: int = 0  # register cap per thread (0: the compiler's); more programs per SM


def mma_grid(m: int, n: int, k: int, cfg: MmaConfig) -> tuple[tuple[int, int, int], int]:
    """(grid, K tiles per slice) of a launch; the slice count never leaves a slice empty."""
    split, per_split = k_slices(launcher.cdiv(k, cfg.block_k), cfg.split)
    return (launcher.cdiv(n, cfg.block_n), launcher.cdiv(m, cfg.block_m), split), per_split


_LOCK_TILES = 1024  # output tiles a split-K launch may have
_WORKSPACES: dict[tuple, tuple[Tensor, Tensor]] = {}
_RETIRED: list[tuple[Tensor, Tensor]] = []  # outgrown workspaces a captured graph may still use


def workspace(numel: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """(fp32 partials of >= numel, int32 split-K counters, zero between launches) for the
    current stream of `device`: kernels of one stream run one after another, so they share it
    (no allocation per call); other streams get their own. Grown, never freed (a CUDA graph
    captured earlier keeps pointing at it); not cached while a graph is being captured (that
    memory belongs to the graph's pool)."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        key: tuple = (index, driver.active.get_current_stream(index))
    else:  # the interpreter: one stream
        key = (device.type,)
    ws = _WORKSPACES.get(key)
    if ws is not None and ws[0].numel() >= numel:
        return ws
    grown = (torch.empty(max(numel, 1 << 18), dtype=torch.float32, device=device),
             ws[1] if ws is not None else torch.zeros(_LOCK_TILES, dtype=torch.int32,
                                                      device=device))
    if device.type != "cuda" or not torch.cuda.is_current_stream_capturing():
        if ws is not None:
            _RETIRED.append(ws)
        _WORKSPACES[key] = grown
    return grown


@dataclass(frozen=True)
class MmaPlan:
    """What a call of one (weight, M bucket, dtypes, bias?) needs, built once: the per-call
    work is then an output allocation and one direct launch (kernels.triton.launcher)."""

    cfg: MmaConfig
    grid_n: int
    per_split: int
    split: int
    data: Tensor
    scales: Tensor
    act_scale: Optional[Tensor]
    raw_out: bool  # `out` is passed as bf16, not as an int16 bits view
    n: int
    k: int
    head: tuple  # the constexprs, in the kernel's parameter order
    key: int  # launcher.intern of the specialization that the plan fixes


def mma_plan(cached: dict, consts: dict, n: int, k: int, m_max: int, dot_kind: int,
             precision: str, hw_cast: bool, in_kind: int, out_kind: int, has_bias: bool,
             cfg: MmaConfig, asm: bool, raw_x: bool, tiled: bool = True) -> MmaPlan:
    """The launch plan for up to `m_max` rows (the M bucket's top)."""
    words = fp4_words(cached, consts, k, cfg.block_k)
    grid, per_split = mma_grid(m_max, n, k, cfg)
    split = grid[2]
    if split > 1 and grid[0] * grid[1] > _LOCK_TILES:
        cfg = MmaConfig(cfg.block_m, cfg.block_n, cfg.block_k, 1, cfg.warps, cfg.stages,
                        cfg.maxnreg)
        grid, per_split = mma_grid(m_max, n, k, cfg)
        split = 1
    data = cached["data"] if words is None else words
    scales = cached["scales"]
    if tiled and words is not None:
        data, scales = tiled_fp4(cached, words, cfg.block_n, cfg.block_k)
    fp8 = (words is None and consts["W_BITS"] == 8 and not consts["W_IS_INT"]
           and consts["W_PACK"] == 0 and not consts["W_SAT"] and k % cfg.block_k == 0)
    scale = cached["act_scale"]
    raw_out = out_kind == 1 and hw_cast  # bf16 output stored as bf16 (no int16 view)
    flags = dict(IN_KIND=in_kind, OUT_KIND=out_kind, HAS_BIAS=has_bias, **consts,
                 DOT_KIND=dot_kind, DOT_PRECISION=precision, HW_CAST=hw_cast,
                 WORDS=words is not None, ASM=bool(asm and words is not None and dot_kind == 0),
                 TILED=bool(tiled and words is not None), FP8=fp8, RAW_OUT=raw_out, RAW_X=raw_x, SPLIT=split, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                 BLOCK_K=cfg.block_k)
    names = _mma_linear_kernel.arg_names
    head = tuple(flags[name] for name in names[names.index("IN_KIND"):])
    return MmaPlan(cfg, grid[0], per_split, split, data, scales, scale, raw_out, n, k, head,
                   launcher.intern((data.device.index, head, data.stride(0), n, k)))


def run_mma(plan: MmaPlan, x2d: Tensor, out: Tensor, bias: Tensor | None) -> None:
    """One launch of `plan` for x2d [M, K] into `out` [M, N]: x2d a bits view unless the plan
    feeds bf16 x raw; out of the plan's output dtype, bf16 outputs as bf16 or as their int16
    bits view (fp32: its int32 view, fp16 as it is)."""
    m = x2d.shape[0]
    cfg = plan.cfg
    if plan.raw_out != (out.dtype == torch.bfloat16):  # either form of a bf16 output is taken
        out = out.view(torch.bfloat16 if plan.raw_out else torch.int16)
    grid = (plan.grid_n, -(-m // cfg.block_m), plan.split)
    part, lock = workspace(plan.split * grid[0] * grid[1] * cfg.block_n * cfg.block_m
                           if plan.split > 1 else 1, x2d.device)
    b = bias if bias is not None else lock
    s_arg = plan.act_scale if plan.act_scale is not None else lock
    key = (plan.key, x2d.dtype, out.dtype, aligned(x2d), x2d.stride(0) % 16 == 0, aligned(b),
           aligned(out), out.stride(0) % 16 == 0)
    launcher.launch(_mma_linear_kernel, key, grid,
                    (x2d, plan.data, plan.scales, s_arg, b, out, part, lock, m, plan.n,
                     plan.k, plan.per_split, x2d.stride(0), plan.data.stride(0),
                     plan.scales.stride(0), out.stride(0)) + plan.head,
                    num_warps=cfg.warps, num_stages=cfg.stages, maxnreg=cfg.maxnreg)


def launch_mma(x2d: Tensor, out: Tensor, cached: dict, bias: Tensor | None, consts: dict,
               dot_kind: int, precision: str, hw_cast: bool, in_kind: int, out_kind: int,
               cfg: MmaConfig, asm: bool, raw_x: bool, tiled: bool = True) -> None:
    """`mma_plan` + `run_mma` in one call (tests and tools; layers keep their plans)."""
    plan = mma_plan(cached, consts, out.shape[1], x2d.shape[1], x2d.shape[0], dot_kind,
                    precision, hw_cast, in_kind, out_kind, bias is not None, cfg, asm, raw_x,
                    tiled)
    run_mma(plan, x2d, out, bias)


__all__ = ["MmaConfig", "MmaPlan", "launch_mma", "mma_grid", "mma_plan", "run_mma",
           "workspace"]
