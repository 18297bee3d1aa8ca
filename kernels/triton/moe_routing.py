"""The MoE host steps around the expert GEMM, as one Triton launch each: sort the routed rows by
expert (with the tile table) and add the top_k slots of each token.

Why: done in torch ops, the sort, gather, tile table and slot sum were ~30 small kernels a call
(sort, scatter_add, two cumsums, searchsorted, index_selects, casts, a cat, clone and adds);
on the H200 that was ~45 us of a 66 us MoE layer at T = 1 (E = 8, top-2, 2048 x 2048), where
bf16 `torch._grouped_mm` took 50 us. One program does the counting sort and the table (three
launches, a program a chunk of rows, past `ONE_PROGRAM_CHUNKS`), one launch the combine; the
only torch op left between them is the token gather.

Each has its torch twin beside it (`sort_rows_torch`, `combine_slots`): the tests compare them
bit for bit (same stable order, same int32 table, same fp32 adds in the same order).

The packed tile table (int32, 2 * slots + 2 * E entries) is [expert of slot | M tile of slot |
first sorted row of expert | rows of expert]; a slot past the last tile holds expert E.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernels.reference.moe import combine_slots
from kernels.triton import launcher
from kernels.triton.mx_codec import KIND_OF_DTYPE, store_fp32
from kernels.triton.mx_quant import _INTERPRETED, bits_view


def tile_table(expert_of_row: Tensor, num_experts: int, block_m: int, slots: int):
    """(tile_expert, tile_m, start, count) int32 tensors, all of fixed size (no device sync).

    Sorted rows: expert e owns rows [start[e], start[e] + count[e]) and tiles
    [first[e], first[e] + cdiv(count[e], block_m)); a table slot past the last tile -> e = E."""
    # scatter_add, not bincount: bincount reads the max id on the host (a device sync that
    # breaks CUDA-graph capture, which decode loops in inference engines rely on)
    count = torch.zeros(num_experts, dtype=torch.int64, device=expert_of_row.device)
    count.scatter_add_(0, expert_of_row.long(), torch.ones_like(expert_of_row, dtype=torch.int64))
    start = torch.cumsum(count, 0) - count
    tiles = (count + block_m - 1) // block_m
    last = torch.cumsum(tiles, 0)  # one past each expert's last tile
    slot = torch.arange(slots, device=expert_of_row.device)
    tile_expert = torch.searchsorted(last, slot, right=True)  # E past the last tile
    first = (last - tiles).index_select(0, tile_expert.clamp(max=num_experts - 1))
    tile_m = slot - first
    return (tile_expert.to(torch.int32), tile_m.to(torch.int32), start.to(torch.int32),
            count.to(torch.int32))


def table_slots(rows: int, num_experts: int, block_m: int) -> int:
    """The tile table's length: an upper bound on the M tiles of `rows` rows over the experts."""
    return launcher.cdiv(rows, block_m) + min(num_experts, rows)


def sort_rows_torch(topk_ids: Tensor, topk_weights: Tensor, num_experts: int,
                    block_m: int) -> tuple[Tensor, Tensor, Tensor, int, Tensor]:
    """`sort_rows`' twin in torch ops (the test oracle): (source token of each sorted row, fp32
    routing weights, output row t * top_k + k of each (int32), slots, packed tile table)."""
    rows = topk_ids.numel()
    flat = topk_ids.reshape(rows)
    order = torch.sort(flat, stable=True).indices  # (token, slot) pairs in expert order
    rw_sorted = topk_weights.reshape(rows).float().index_select(0, order).contiguous()
    slots = table_slots(rows, num_experts, block_m)
    table = tile_table(flat.index_select(0, order), num_experts, block_m, slots)
    src = (order // topk_ids.shape[1]).to(torch.int32)
    return src, rw_sorted, order.to(torch.int32), slots, torch.cat(table)


@triton.jit
def _sort_rows_kernel(ids_ptr, rw_ptr, src_ptr, rws_ptr, dest_ptr, grp_ptr, rows, slots,
                      TOP_K: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr,
                      BLOCK_M: tl.constexpr, CHUNK: tl.constexpr):
    """One program: a stable counting sort of the rows by expert id, then the tile table."""
    ex = tl.arange(0, E_PAD)
    counts = tl.zeros([E_PAD], dtype=tl.int32)
    for c0 in range(0, rows, CHUNK):  # pass 1: rows per expert
        counts += _chunk_counts(ids_ptr, c0 + tl.arange(0, CHUNK), rows, ex, E_PAD)
    start = tl.cumsum(counts, axis=0) - counts
    seen = start  # the next free sorted row of each expert
    for c0 in range(0, rows, CHUNK):  # pass 2: each row's place, in row order (stable)
        seen += _place_chunk(ids_ptr, rw_ptr, src_ptr, rws_ptr, dest_ptr,
                             c0 + tl.arange(0, CHUNK), rows, seen, ex, TOP_K, E_PAD)
    _write_table(grp_ptr, slots, start, counts, ex, E, BLOCK_M, CHUNK)


@triton.jit
def _chunk_counts(ids_ptr, r, rows, ex, E_PAD: tl.constexpr):
    """Rows r (< rows) per expert [E_PAD]."""
    ids = tl.load(ids_ptr + r, mask=r < rows, other=E_PAD).to(tl.int32)
    return tl.sum((ids[:, None] == ex[None, :]).to(tl.int32), axis=0)


@triton.jit
def _place_chunk(ids_ptr, rw_ptr, src_ptr, rws_ptr, dest_ptr, r, rows, base, ex,
                 TOP_K: tl.constexpr, E_PAD: tl.constexpr):
    """Rows r (< rows, in order) to their sorted places: expert e's next free place is base[e],
    then in row order. Returns the rows placed per expert."""
    ok = r < rows
    ids = tl.load(ids_ptr + r, mask=ok, other=E_PAD).to(tl.int32)
    hit = (ids[:, None] == ex[None, :]).to(tl.int32)
    earlier = tl.cumsum(hit, axis=0) - hit  # same-expert rows before it in this chunk
    pos = tl.sum(hit * (earlier + base[None, :]), axis=1)
    tl.store(src_ptr + pos, r // TOP_K, mask=ok)
    tl.store(dest_ptr + pos, r, mask=ok)
    tl.store(rws_ptr + pos, tl.load(rw_ptr + r, mask=ok, other=0).to(tl.float32), mask=ok)
    return tl.sum(hit, axis=0)


@triton.jit
def _write_table(grp_ptr, slots, start, counts, ex, E: tl.constexpr, BLOCK_M: tl.constexpr,
                 CHUNK: tl.constexpr):
    """The packed tile table from the experts' starts and counts [E_PAD]."""
    tiles = (counts + BLOCK_M - 1) // BLOCK_M
    last = tl.cumsum(tiles, axis=0)  # one past each expert's last tile
    first = last - tiles
    real = ex < E
    for s0 in range(0, slots, CHUNK):  # slot -> (expert, M tile)
        s = s0 + tl.arange(0, CHUNK)
        te = tl.sum(((last[None, :] <= s[:, None]) & real[None, :]).to(tl.int32), axis=1)
        mine = ex[None, :] == tl.minimum(te, E - 1)[:, None]
        f = tl.sum(tl.where(mine, first[None, :], 0), axis=1)
        tl.store(grp_ptr + s, te, mask=s < slots)
        tl.store(grp_ptr + slots + s, s - f, mask=s < slots)
    tl.store(grp_ptr + 2 * slots + ex, start, mask=real)
    tl.store(grp_ptr + 2 * slots + E + ex, counts, mask=real)


# --- the same sort over many programs (rows past ONE_PROGRAM_CHUNKS chunks): counts a chunk,
# one program's scan and table, places a chunk; 3 launches, each chunk's work in parallel
@triton.jit
def _counts_kernel(ids_ptr, hist_ptr, rows, E_PAD: tl.constexpr, CHUNK: tl.constexpr):
    """hist[c] = chunk c's rows per expert."""
    c = tl.program_id(0)
    ex = tl.arange(0, E_PAD)
    tl.store(hist_ptr + c * E_PAD + ex,
             _chunk_counts(ids_ptr, c * CHUNK + tl.arange(0, CHUNK), rows, ex, E_PAD))


@triton.jit
def _offsets_kernel(hist_ptr, grp_ptr, chunks, slots, E: tl.constexpr, E_PAD: tl.constexpr,
                    BLOCK_M: tl.constexpr, CHUNK: tl.constexpr):
    """One program: hist[c] becomes the rows of each expert in the chunks before c (an
    exclusive scan over the chunks), then the experts' starts and counts and the tile table."""
    ex = tl.arange(0, E_PAD)
    counts = tl.zeros([E_PAD], dtype=tl.int32)
    for c0 in range(0, chunks, CHUNK):
        c = c0 + tl.arange(0, CHUNK)
        at = hist_ptr + c[:, None] * E_PAD + ex[None, :]
        ok = (c < chunks)[:, None] & (ex >= 0)[None, :]
        h = tl.load(at, mask=ok, other=0)
        tl.store(at, tl.cumsum(h, axis=0) - h + counts[None, :], mask=ok)
        counts += tl.sum(h, axis=0)
    _write_table(grp_ptr, slots, tl.cumsum(counts, axis=0) - counts, counts, ex, E, BLOCK_M,
                 CHUNK)


@triton.jit
def _place_kernel(ids_ptr, rw_ptr, src_ptr, rws_ptr, dest_ptr, hist_ptr, grp_ptr, rows, slots,
                  TOP_K: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr,
                  CHUNK: tl.constexpr):
    """Chunk c's rows to their places: an expert's start plus its rows in earlier chunks."""
    c = tl.program_id(0)
    ex = tl.arange(0, E_PAD)
    base = tl.load(grp_ptr + 2 * slots + ex, mask=ex < E, other=0) + \
        tl.load(hist_ptr + c * E_PAD + ex)
    _place_chunk(ids_ptr, rw_ptr, src_ptr, rws_ptr, dest_ptr, c * CHUNK + tl.arange(0, CHUNK),
                 rows, base, ex, TOP_K, E_PAD)


# Up to this many chunks (4096 // E_PAD rows each) one program sorts the rows: one launch,
# what small T needs (T = 1 to 16: one or two chunks). Past it the chunk loop is serial work of
# one SM — ~300 instructions a chunk to count, ~900 to place (sm_90a SASS, E = 64), 192 chunks
# each at DeepSeek-like T = 2048 (12288 rows) — so three launches do it with a program a chunk.
ONE_PROGRAM_CHUNKS = 8


def sort_rows(topk_ids: Tensor, topk_weights: Tensor, num_experts: int,
              block_m: int) -> tuple[Tensor, Tensor, Tensor, int, Tensor]:
    """The T * top_k (token, slot) rows in expert order (stable), with no device sync: one
    launch up to ONE_PROGRAM_CHUNKS chunks of rows, else three. Returns (source token of each
    sorted row (int32), their fp32 routing weights, each one's output row t * top_k + k
    (int32), the table's length, the packed tile table)."""
    rows = topk_ids.numel()
    dev = topk_ids.device
    slots = table_slots(rows, num_experts, block_m)
    src = torch.empty(rows, dtype=torch.int32, device=dev)
    dest = torch.empty(rows, dtype=torch.int32, device=dev)
    rw_sorted = torch.empty(rows, dtype=torch.float32, device=dev)
    grp = torch.empty(2 * slots + 2 * num_experts, dtype=torch.int32, device=dev)
    e_pad = triton.next_power_of_2(num_experts)
    chunk = max(16, 4096 // e_pad)  # a [chunk, E] one-hot a pass: 4096 lanes
    ids, rw, top_k = topk_ids.reshape(rows), topk_weights.reshape(rows), topk_ids.shape[1]
    chunks = launcher.cdiv(rows, chunk)
    if chunks <= ONE_PROGRAM_CHUNKS:
        launcher.launch_auto(_sort_rows_kernel, (1,),
                             (ids, rw, src, rw_sorted, dest, grp, rows, slots, top_k,
                              num_experts, e_pad, block_m, chunk), num_warps=4)
        return src, rw_sorted, dest, slots, grp
    hist = torch.empty((chunks, e_pad), dtype=torch.int32, device=dev)
    launcher.launch_auto(_counts_kernel, (chunks,), (ids, hist, rows, e_pad, chunk),
                         num_warps=4)
    launcher.launch_auto(_offsets_kernel, (1,), (hist, grp, chunks, slots, num_experts, e_pad,
                                                 block_m, chunk), num_warps=4)
    launcher.launch_auto(_place_kernel, (chunks,), (ids, rw, src, rw_sorted, dest, hist, grp,
                                                    rows, slots, top_k, num_experts, e_pad,
                                                    chunk), num_warps=4)
    return src, rw_sorted, dest, slots, grp


def table_views(grp: Tensor, slots: int, num_experts: int) -> tuple[Tensor, ...]:
    """The packed table's four parts (views): tile_expert, tile_m, start, count."""
    return grp[:slots], grp[slots:2 * slots], grp[2 * slots:2 * slots + num_experts], \
        grp[2 * slots + num_experts:]


@triton.jit
def _combine_kernel(w_ptr, out_ptr, n, TOP_K: tl.constexpr, OUT_KIND: tl.constexpr,
                    HW_CAST: tl.constexpr, BLOCK: tl.constexpr):
    """out[t] = (w[t, 0] + w[t, 1] + ...) in fp32, left to right, cast once (RNE)."""
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < n
    row = w_ptr + t * TOP_K * n + cols
    acc = tl.load(row, mask=ok)
    for k in tl.static_range(1, TOP_K):
        acc += tl.load(row + k * n, mask=ok)
    store_fp32(out_ptr + t * n + cols, acc, ok, OUT_KIND, HW_CAST)


_COMBINE_BLOCK = 1024


def combine(weighted: Tensor, out_dtype: torch.dtype) -> Tensor:
    """[T, top_k, N] contiguous fp32 weighted expert outputs -> [T, N] in out_dtype, bit for bit
    `combine_slots(weighted).to(out_dtype)`, in one launch."""
    tokens, top_k, n = weighted.shape
    out = torch.empty((tokens, n), dtype=out_dtype, device=weighted.device)
    if tokens and n:
        launcher.launch_auto(_combine_kernel, (tokens, launcher.cdiv(n, _COMBINE_BLOCK)),
                             (weighted, bits_view(out), n, top_k, KIND_OF_DTYPE[out_dtype],
                              not _INTERPRETED, _COMBINE_BLOCK), num_warps=4)
    return out


__all__ = ["ONE_PROGRAM_CHUNKS", "combine", "combine_slots", "sort_rows", "sort_rows_torch",
           "table_slots", "table_views", "tile_table"]
