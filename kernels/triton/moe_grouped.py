"""Grouped MoE experts in ONE Triton launch: activation QDQ + weight dequant + dot + routing weight.

Host side (no device sync; kernels/triton/moe_routing.py, one launch): the T * top_k (token,
slot) pairs are sorted by expert (a stable counting sort, so the order is deterministic) and a
fixed-size tile table maps program id 0 to (expert, M-tile); its length is an upper bound on
the tiles, cdiv(T * top_k, BLOCK_M) + min(E, T * top_k), and the unused entries hold expert E,
which the kernel skips. The token rows are gathered into expert order once.

Kernel: a program owns the [BLOCK_M, BLOCK_N] tile (expert e, M-tile, N-tile) and walks K with
the emulation linear kernels' own helpers (kernels/triton/mx_codec.py: `act_tile`, the
dispatcher-exact activation QDQ; `weight_tile`, the exact dequant; linear_tiles.py:
`prepare_tensors`, the one key -> constexpr mapping), so the MoE and the linear path cannot
drift apart. The fp32 accumulator is multiplied by the slot's fp32 routing weight and stored, still fp32, to row
t * top_k + k of a [T * top_k, N] buffer: every row is written by exactly one program, so there
are no atomics and the result is deterministic. The slots are then added in order and cast once
(moe_routing.combine, bit for bit kernels.reference.moe.combine_slots).

Against kernels.reference.moe the only difference is the dot's summation order (the operands
are exact in the dot's input type, as in the linear kernel; the weight multiply, the slot sum
and the final cast are the same fp32 operations in the same order).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernels.base import PreparedWeight
from kernels.dispatch import activation_qdq
from kernels.mx import MXTensor
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import fit, mx_quant
from kernels.triton.linear_tiles import dot_choice, prepare_tensors
from kernels.triton.moe_routing import combine, sort_rows, table_views
from kernels.triton.mx_codec import KIND_OF_DTYPE, store_fp32
from kernels.triton.mx_tiles import act_tile, weight_tile

_WHERE = "kernels.triton.moe_grouped"


@triton.jit
def _grouped_experts_kernel(
        x_ptr, w_data_ptr, w_scale_ptr, s_ptr, rw_ptr, dest_ptr, out_ptr,
        tile_expert_ptr, tile_m_ptr, start_ptr, count_ptr, N, K, E,
        stride_x, stride_de, stride_dn, stride_se, stride_sn, stride_o,
        IN_KIND: tl.constexpr,
        ACT_MODE: tl.constexpr, A_MBITS: tl.constexpr, A_BIAS: tl.constexpr,
        A_EMAX: tl.constexpr, A_MAX_NORMAL: tl.constexpr, A_MAXN_MANT: tl.constexpr,
        A_MAXN_SUB: tl.constexpr, A_IS_INT: tl.constexpr, A_ROUNDING: tl.constexpr,
        W_MBITS: tl.constexpr, W_BIAS: tl.constexpr, W_BITS: tl.constexpr,
        W_IS_INT: tl.constexpr, W_SPECIALS: tl.constexpr, W_PACK: tl.constexpr,
        W_SAT: tl.constexpr,
        DOT_KIND: tl.constexpr, DOT_PRECISION: tl.constexpr, HW_CAST: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tl.static_assert(BLOCK_K % 32 == 0, "BLOCK_K must hold whole 32-element MX blocks")
    tl.static_assert((BLOCK_M & (BLOCK_M - 1)) == 0, "BLOCK_M must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_N & (BLOCK_N - 1)) == 0, "BLOCK_N must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_K & (BLOCK_K - 1)) == 0, "BLOCK_K must be a power of two (tl.arange)")
    tile = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(tile_expert_ptr + tile)
    if e < E:  # table entries past the real tiles hold E: nothing to do
        pid_m = tl.load(tile_m_ptr + tile)
        start = tl.load(start_ptr + e)  # the expert's first row in expert order
        m = tl.load(count_ptr + e)  # its row count
        x_e = x_ptr + start.to(tl.int64) * stride_x
        d_e = w_data_ptr + e.to(tl.int64) * stride_de
        s_e = w_scale_ptr + e.to(tl.int64) * stride_se
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for kk in range(tl.cdiv(K, BLOCK_K)):
            a = act_tile(x_e, stride_x, s_ptr, m, K, pid_m, kk, IN_KIND, ACT_MODE, A_MBITS,
                         A_BIAS, A_EMAX, A_MAX_NORMAL, A_MAXN_MANT, A_MAXN_SUB, A_IS_INT,
                         A_ROUNDING, HW_CAST, BLOCK_M, BLOCK_K)
            w = weight_tile(d_e, s_e, stride_dn, stride_sn, N, K, pid_n, kk, W_MBITS, W_BIAS,
                            W_BITS, W_IS_INT, W_SPECIALS, W_PACK, W_SAT, BLOCK_N, BLOCK_K)
            if DOT_KIND == 0:
                acc = tl.dot(a.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)), acc)
            else:
                acc = tl.dot(a, tl.trans(w), acc, input_precision=DOT_PRECISION)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < m
        # fp32 routing weights arrive as int32 bits (exact on the interpreter too)
        rw = tl.load(rw_ptr + start + rows, mask=row_ok, other=0).to(tl.float32, bitcast=True)
        acc = acc * rw[:, None]  # the same fp32 multiply as the reference's w_k * y_k
        dest = tl.load(dest_ptr + start + rows, mask=row_ok, other=0)  # row t * top_k + k
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        store_fp32(out_ptr + dest.to(tl.int64)[:, None] * stride_o + cols[None, :], acc,
                   row_ok[:, None] & (cols < N)[None, :], 0, HW_CAST)


# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) by the mean rows per expert: "small" (decode,
# <= SMALL_ROWS) wastes fewer masked rows per expert tile. BLOCK_K a multiple of 64 keeps fp4
# bytes and fp6 words whole. Untuned first choices (GPU tuning is a later issue).
SMALL_ROWS = 16
GPU_TILES = {"small": (16, 64, 128, 4, 3), "large": (64, 128, 64, 4, 3)}
# Interpreter: small tiles so the tests cover N and row tails, several M-tiles and the K loop.
INTERPRETER_TILES = {"small": (8, 16, 32, 1, 1), "large": (16, 16, 32, 1, 1)}

_SHARED_CONSTEXPRS = ("ACT_MODE", "A_MBITS", "A_BIAS", "A_EMAX", "A_MAX_NORMAL", "A_MAXN_MANT",
                      "A_MAXN_SUB", "A_IS_INT", "A_ROUNDING", "W_MBITS", "W_BIAS", "W_BITS",
                      "W_IS_INT", "W_SPECIALS", "W_PACK", "W_SAT")


def kernel_constexprs(weight: MXTensor, activation: QuantKey | None,
                      act_scale: Tensor | None) -> dict:
    """The weight / activation constexprs and kernel-ready tensors, built by the linear
    kernel's own set-up (one key -> ACT_MODE mapping for both paths). A key the dispatcher
    does not know raises UnknownActivationKey; a static key without a scale, a ValueError."""
    if activation is not None:
        activation_qdq(activation)  # UnknownActivationKey before anything else
    prepared = PreparedWeight(weight, SchemeContract(weight=QuantKey.mx(
        weight.fmt, rounding=weight.rounding, static=True), activation=activation), act_scale)
    return prepare_tensors(prepared)


def grouped_experts_triton(x: Tensor, weight: MXTensor, activation: QuantKey | None,
                           act_scale: Tensor | None, topk_ids: Tensor, topk_weights: Tensor,
                           out_dtype: torch.dtype | None = None, *,
                           constexprs: dict | None = None) -> Tensor:
    """x [T, K], weight MXTensor [E, N, K], routing [T, top_k] (validated by the caller) ->
    [T, N] in out_dtype (default x's dtype); float32 gives the result before the final cast.
    `constexprs`: kernel_constexprs(weight, activation, act_scale), cached by the caller."""
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if out_dtype not in KIND_OF_DTYPE:
        raise ValueError(f"{_WHERE}: out_dtype {out_dtype} is not float32, bfloat16 or float16")
    if not mx_quant._INTERPRETED and not x.is_cuda:
        raise ValueError(f"{_WHERE}: input is on {x.device}; the Triton kernel needs a CUDA / "
                         "ROCm tensor (or TRITON_INTERPRET=1 set before importing kernels.triton)")
    cached = constexprs if constexprs is not None else kernel_constexprs(weight, activation,
                                                                         act_scale)
    tokens, k = x.shape
    num_experts, n, _ = weight.shape
    top_k = topk_ids.shape[1]
    if tokens == 0:
        return torch.empty((0, n), dtype=out_dtype, device=x.device)
    rows = tokens * top_k
    data, scales = cached["data"], cached["scales"]
    if data.device != x.device:
        raise ValueError(f"{_WHERE}: input on {x.device} but expert weights on {data.device}; "
                         "move them to one device")
    if not mx_quant._INTERPRETED:  # sm_90, bf16 tokens, a layout that holds the experts: the
        # Gluon wgmma kernel (moe_wgmma.unavailable / layout_holds say which)
        from kernels.triton import moe_wgmma
        if moe_wgmma.VERIFIED and moe_wgmma.unavailable(x, weight, activation) is None and \
                moe_wgmma.layout_holds(cached, weight):
            return moe_wgmma.grouped_experts_wgmma(x, weight, activation, topk_ids,
                                                   topk_weights, out_dtype, cached)
    # only the constexprs this kernel declares (the linear set-up may carry more of its own)
    consts = {name: cached["consts"][name] for name in _SHARED_CONSTEXPRS}
    dot_kind, precision = dot_choice(x.dtype, consts["ACT_MODE"])
    tiles = INTERPRETER_TILES if mx_quant._INTERPRETED else GPU_TILES
    size = "small" if rows <= SMALL_ROWS * num_experts else "large"  # mean rows per expert
    bm, bn, bk, warps, stages = tiles[size]
    src, rw_sorted, dest, slots, grp = sort_rows(topk_ids, topk_weights, num_experts, bm)
    x_sorted = x.index_select(0, src)
    tile_expert, tile_m, start, count = table_views(grp, slots, num_experts)

    weighted = torch.empty((rows, n), dtype=torch.float32, device=x.device)
    scale = cached["act_scale"]

    def run(cfg: fit.TileConfig) -> None:
        _grouped_experts_kernel[(slots, triton.cdiv(n, cfg.bn))](
            mx_quant.bits_view(x_sorted), data, scales, scale if scale is not None else scales,
            rw_sorted.view(torch.int32), dest, weighted.view(torch.int32),
            tile_expert, tile_m, start, count, n, k, num_experts,
            x_sorted.stride(0), data.stride(0), data.stride(1), scales.stride(0),
            scales.stride(1), weighted.stride(0),
            IN_KIND=KIND_OF_DTYPE[x.dtype], DOT_KIND=dot_kind, DOT_PRECISION=precision,
            HW_CAST=not mx_quant._INTERPRETED, BLOCK_M=cfg.bm, BLOCK_N=cfg.bn, BLOCK_K=cfg.bk,
            num_warps=cfg.warps, num_stages=cfg.stages, **consts)

    # BLOCK_M is fixed (the tile table above is built for it); stages, K and N tiles may shrink
    key = (x.device.index, x.dtype, dot_kind, precision, tuple(sorted(consts.items())))
    fit.launch_fitting(_WHERE, key, fit.TileConfig(bm, bn, bk, warps, stages), run,
                       lambda cfg: fit.smaller_configs(cfg, stages="stages",
                                                       blocks=(("bk", 64), ("bn", 16))))
    return combine(weighted.view(tokens, top_k, n), out_dtype)


__all__ = ["grouped_experts_triton", "kernel_constexprs"]
