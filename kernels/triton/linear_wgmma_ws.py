"""The wgmma kernel warp-specialized (`WgmmaConfig.ws`): a loader warp and two consumer
warpgroups in one program, in Gluon (`gl.warp_specialize`).

Why: in the one-partition kernel (linear_wgmma.py) every warp runs one serial chain a K tile —
wait for the copies, CTA barrier, issue the next tile's copies, decode, wgmma, wait for it (its
A registers cannot stay in flight across the loop's back edge: part 4 of docs/benchmarks.md).
At M = 128 ncu put 25 % of the samples on the loop top (copies, barriers), 23 % on the decode,
24 % on the wgmma wait and 16 % on the split-K epilogue, with the tensor pipe 44 % busy
(part 8). Here:
- one loader warp issues every copy by TMA — the x tile ([block_m, block_k] of x, zero-filled
  past M and K), the tile's words, B words (mxfp6 / mxfp8) and scale bytes (each a contiguous
  run of the prepared layout, copied as [rows, 256] boxes of its flat view) — into a ring of
  STAGES slots, each with a "full" mbarrier (the copies' bytes) and an "empty" one (released by
  the consumer that read it); no thread of a consumer computes an address or waits on a copy;
- two consumer warpgroups take alternate K tiles of the same 64 weight rows: one decodes while
  the other's wgmma runs, with no CTA barrier between them (each partition's barriers count its
  own 128 threads); the decode and the operand layouts are the one-partition kernel's own
  (wgmma_decode.slot_operands / decode), so the bits a tile are the same;
- the second consumer hands its accumulator to the first through shared memory (one mbarrier),
  which adds it (even tiles + odd tiles: a fixed order, deterministic) and finishes the tile as
  the one-partition kernel does (wgmma_tiles.finish_tile: bias, bf16 store, or split-K);
- BLOCK_M 256 (large M, several M tiles a call; `wgmma_config.BLOCK_M_WIDE`, gated by
  linear_wgmma.WIDE_M_VERIFIED): the consumers split the activation rows instead, 128 each,
  both decoding every K tile (a 64 x 256 fp32 sum handed over would not fit the registers),
  each storing its own rows; no split-K, dense only.

The kernel takes the one-partition kernel's parameters (so run_wgmma and its `launcher.Bound`,
and moe_wgmma's launch, serve both): the weight operands are TMA descriptors
(`ws_descriptors`), x a descriptor as with `tma_x`; GROUPED runs MoE experts off the same tile
table; the parts it has no use for (fused QDQ, K halves, rep, two warpgroups) must be off
(`WgmmaConfig` refuses them with ws). Gated (`linear_wgmma.WS_VERIFIED`) until its GPU tests
passed in a whole-suite run; CPU CI compiles it for sm_90a (the copies, the bytes each slot
expects, setmaxnreg, no spills) and checks the descriptors and the launches.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                              warpgroup_mma, warpgroup_mma_wait)

from kernels.triton.wgmma_decode import acc_layout, decode, slot_operands, words_layout
from kernels.triton.wgmma_tiles import (X_SMEM, _tma_load, cta_barrier, expert_rows, finish_tile,
                                        layout_chunks, weight_ring)

ROW = 256  # elements a row of a weight operand's flat TMA view (a box is [rows, ROW])
WREGS = gl.constexpr(232)  # registers a consumer warp (setmaxnreg; the first: what is left)
LOADER_REGS = gl.constexpr(40)  # registers a loader thread


def flat_layout(bits: int):
    """The shared layout of a weight operand's TMA box: no swizzle (the consumers read the
    slot in the prepared layout's own order, which is the flat order)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=bits, rank=2)


W_FLAT = gl.constexpr(flat_layout(32))
S_FLAT = gl.constexpr(flat_layout(8))
_ROW = gl.constexpr(ROW)
# triton 3.6 (the H200) names it _reinterpret, 3.9 (CPU CI) reinterpret
_REINTERPRET = gl.constexpr(hasattr(gl.shared_memory_descriptor, "reinterpret"))


@gluon.jit
def _as_box(slot, dtype: gl.constexpr, rows: gl.constexpr, layout: gl.constexpr):
    """A ring slot (the consumers' view) as the [rows, ROW] box its TMA copy writes."""
    if _REINTERPRET:
        box = slot.reinterpret(dtype, [rows, _ROW], layout)
    else:
        box = slot._reinterpret(dtype, [rows, _ROW], layout)
    return box


def ws_descriptors(cache: dict, key: object, words, bwords, sbytes, block_k: int) -> tuple:
    """TMA descriptors of a prepared layout's words, B words (None, or the words again: the
    words' own) and scale bytes — flat [numel / ROW, ROW] views, one K tile of 64 rows a box —
    built once and kept in `cache` under `key` beside the layout (dense plans and MoE alike)."""
    found = cache.get(key)
    if found is not None:
        return found
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    def boxes(t, per_tile: int, layout):
        return TensorDescriptor.from_tensor(t.view(-1, ROW), [per_tile // ROW, ROW], layout)

    tiles = words.numel() // (8 * block_k)  # 64 rows x block_k: 8 * block_k words a tile
    w = boxes(words, 8 * block_k, W_FLAT.value)
    b = w if bwords is None or bwords is words else boxes(bwords, bwords.numel() // tiles,
                                                          W_FLAT.value)
    return cache.setdefault(key, (w, b, boxes(sbytes, 2 * block_k, S_FLAT.value)))


@gluon.jit(do_not_specialize=["M", "TILES_PER_SPLIT", "E"])
def _ws_linear_kernel(x_ptr, w_ptr, b_ptr, s_ptr, bias_ptr, out_ptr, part_ptr, lock_ptr,
                      grp_ptr, dest_ptr, rw_ptr, M, N, K, TILES_PER_SPLIT, E, stride_x,
                      stride_o, stride_we, stride_se,
                      HAS_BIAS: gl.constexpr, SPLIT: gl.constexpr, BLOCK_M: gl.constexpr,
                      BLOCK_K: gl.constexpr, STAGES: gl.constexpr, WARPS: gl.constexpr,
                      K_TAIL: gl.constexpr, GROUPED: gl.constexpr, FMT: gl.constexpr,
                      ACT: gl.constexpr, SUB_K: gl.constexpr = 1, REP: gl.constexpr = 1,
                      X_TMA: gl.constexpr = True):
    """x_ptr: TMA descriptor of x [M, K] ([BLOCK_M, BLOCK_K] boxes); w_ptr / b_ptr / s_ptr:
    `ws_descriptors`. Grid (N / 64, M tiles, K slices); launched with 4 warps (the first
    consumer; the second and the loader are warp_specialize's workers). GROUPED (MoE experts,
    moe_wgmma): the one-partition kernel's tile table and operands (x the rows in expert
    order; the descriptors span every expert, stride_we words an expert)."""
    gl.static_assert(WARPS == 4 and REP == 1 and SUB_K == 1 and X_TMA)
    # BLOCK_M 256 (large M): the consumers split the rows, 128 each, and both take every K tile
    # (each decodes it: no hand-off of a 64 x 256 sum, which would not fit the registers)
    MSPLIT: gl.constexpr = BLOCK_M == 256
    gl.static_assert(len(ACT) == 0 and (STAGES % 2 == 0 or MSPLIT))  # (WgmmaConfig says why)
    gl.static_assert(not MSPLIT or (SPLIT == 1 and not GROUPED))
    ktiles = (K + BLOCK_K - 1) // BLOCK_K
    k_lo = gl.program_id(2) * TILES_PER_SPLIT
    k_hi = gl.minimum(k_lo + TILES_PER_SPLIT, ktiles)
    # the program's first K tile in the weight's layout (fp4_words.ALIGN: a 64-row block holds
    # K padded to whole tiles of any BLOCK_K)
    tile0 = gl.program_id(0) * (layout_chunks(K) // (BLOCK_K // 128))
    row0 = gl.program_id(1) * BLOCK_M
    rows_left = M - row0
    if GROUPED:  # the tile table as the one-partition kernel's (linear_wgmma); a slot past the
        e = gl.load(grp_ptr + gl.program_id(1))  # last tile runs no K tile and stores nothing
        live = e < E  # (no early return: the partitions are not forked yet)
        e = gl.minimum(e, E - 1)
        row0, rows_left = expert_rows(grp_ptr, gl.program_id(1), e, E, BLOCK_M)
        rows_left = gl.where(live, rows_left, 0)
        k_hi = gl.where(live, k_hi, k_lo)
        tile0 += e * (stride_we // (8 * BLOCK_K))  # an expert's words: whole 64-row tiles
    w_smem, b_smem, s_smem = weight_ring(STAGES, 4, BLOCK_K // 128, FMT)  # one warpgroup's
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_M, BLOCK_K], X_SMEM)
    red_smem = gl.allocate_shared_memory(gl.float32, [64, 16 if MSPLIT else BLOCK_M],
                                         gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    red_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=2 if MSPLIT else 1)  # (MSPLIT: both read a slot)
    mbarrier.init(red_bar, count=1)
    fence_async_shared()  # the inits before any TMA copy completes on them
    gl.warp_specialize([
        (_first_consumer, (x_smem, w_smem, b_smem, s_smem, full, empty, red_smem, red_bar,
                           bias_ptr, out_ptr, part_ptr, lock_ptr, dest_ptr, rw_ptr, row0,
                           rows_left, N, stride_o, k_lo, k_hi, HAS_BIAS, GROUPED, SPLIT, BLOCK_M,
                           BLOCK_K, STAGES, FMT)),
        (_second_consumer, (x_smem, w_smem, b_smem, s_smem, full, empty, red_smem, red_bar,
                            bias_ptr, out_ptr, dest_ptr, rw_ptr, row0, rows_left, N, stride_o,
                            k_lo, k_hi, HAS_BIAS, BLOCK_M, BLOCK_K, STAGES, FMT)),
        (_loader, (x_ptr, w_ptr, b_ptr, s_ptr, x_smem, w_smem, b_smem, s_smem, full, empty,
                   row0, tile0, k_lo, k_hi, BLOCK_M, BLOCK_K, STAGES, FMT)),
    ], [4, 1], [WREGS, LOADER_REGS])


@gluon.jit
def _loader(x_desc, w_desc, b_desc, s_desc, x_smem, w_smem, b_smem, s_smem, full, empty, row0,
            tile0, k_lo, k_hi, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr,
            STAGES: gl.constexpr, FMT: gl.constexpr):
    """One warp: K tile kk into slot (kk - k_lo) % STAGES once its consumer released it (a
    fresh "empty" barrier passes the first round: parity 1)."""
    WR: gl.constexpr = 8 * BLOCK_K // _ROW  # rows of a tile's words in their flat view
    BR: gl.constexpr = WR if FMT == 3 else WR // 2
    SR: gl.constexpr = 2 * BLOCK_K // _ROW
    XB: gl.constexpr = BLOCK_M * BLOCK_K * 2
    for kk in range(k_lo, k_hi):
        i = kk - k_lo
        s = i % STAGES
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
        bar = full.index(s)
        t = tile0 + kk
        if FMT:
            mbarrier.expect(bar, XB + (WR + BR) * _ROW * 4 + SR * _ROW)
            _tma_load(b_desc, [t * BR, 0], bar, _as_box(b_smem.index(s), gl.int32, BR, W_FLAT))
        else:
            mbarrier.expect(bar, XB + WR * _ROW * 4 + SR * _ROW)
        _tma_load(w_desc, [t * WR, 0], bar, _as_box(w_smem.index(s), gl.int32, WR, W_FLAT))
        _tma_load(s_desc, [t * SR, 0], bar, _as_box(s_smem.index(s), gl.uint8, SR, S_FLAT))
        _tma_load(x_desc, [row0, kk * BLOCK_K], bar, x_smem.index(s))


@gluon.jit
def _consume(C: gl.constexpr, x_smem, w_smem, b_smem, s_smem, full, empty, k_lo, k_hi,
             BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
             FMT: gl.constexpr):
    """Consumer C's sum over the K tiles k_lo + C, k_lo + C + 2, ... of its 64 rows and the
    program's BLOCK_M activation rows; BLOCK_M 256: over every K tile, its 128 of the rows."""
    MSPLIT: gl.constexpr = BLOCK_M == 256
    CM: gl.constexpr = 128 if MSPLIT else BLOCK_M  # the consumer's activation rows
    NBH: gl.constexpr = BLOCK_K // 128
    WL: gl.constexpr = words_layout(4, NBH)
    SL: gl.constexpr = gl.SliceLayout(2, WL)
    MMA: gl.constexpr = acc_layout(4, CM)
    A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    acc = gl.zeros([64, CM], gl.float32, MMA)
    for kk in range(k_lo + (0 if MSPLIT else C), k_hi, 1 if MSPLIT else 2):
        i = kk - k_lo
        s = i % STAGES
        mbarrier.wait(full.index(s), (i // STAGES) & 1)
        words, bw, base, sword = slot_operands(w_smem.index(s), b_smem.index(s), s_smem.index(s),
                                               WL, SL, 4, NBH, FMT)
        a = decode(words, bw, base, sword, 64, BLOCK_K, A, FMT)
        xb = x_smem.index(s)
        if MSPLIT:
            xb = xb.slice(128 * C, 128)
        acc = warpgroup_mma(a, xb.permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])  # (A registers: see the module)
        mbarrier.arrive(empty.index(s))  # every thread's reads of the slot are done
    return acc


@gluon.jit
def _first_consumer(x_smem, w_smem, b_smem, s_smem, full, empty, red_smem, red_bar, bias_ptr,
                    out_ptr, part_ptr, lock_ptr, dest_ptr, rw_ptr, row0, rows_left, N, stride_o,
                    k_lo, k_hi, HAS_BIAS: gl.constexpr, GROUPED: gl.constexpr,
                    SPLIT: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr,
                    STAGES: gl.constexpr, FMT: gl.constexpr):
    """The default partition: the even tiles, then + the second consumer's sum, and the tile's
    output (bias / store / split-K, as the one-partition kernel); BLOCK_M 256: every tile, the
    first 128 rows' output."""
    acc = _consume(0, x_smem, w_smem, b_smem, s_smem, full, empty, k_lo, k_hi, BLOCK_M, BLOCK_K,
                   STAGES, FMT)
    if BLOCK_M == 256:
        MMA: gl.constexpr = acc_layout(4, 128)
        finish_tile(acc, out_ptr, part_ptr, lock_ptr, row0, rows_left, N, stride_o, bias_ptr,
                    dest_ptr, rw_ptr, HAS_BIAS, GROUPED, SPLIT, 64, 128, MMA)
    else:
        MMA: gl.constexpr = acc_layout(4, BLOCK_M)
        mbarrier.wait(red_bar, 0)
        acc = acc + red_smem.load(MMA)
        finish_tile(acc, out_ptr, part_ptr, lock_ptr, row0, rows_left, N, stride_o, bias_ptr,
                    dest_ptr, rw_ptr, HAS_BIAS, GROUPED, SPLIT, 64, BLOCK_M, MMA)


@gluon.jit
def _second_consumer(x_smem, w_smem, b_smem, s_smem, full, empty, red_smem, red_bar, bias_ptr,
                     out_ptr, dest_ptr, rw_ptr, row0, rows_left, N, stride_o, k_lo, k_hi,
                     HAS_BIAS: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr,
                     STAGES: gl.constexpr, FMT: gl.constexpr):
    """A worker partition: the odd tiles, its sum handed to the first consumer; BLOCK_M 256:
    every tile, the last 128 rows' output (dense, no split-K)."""
    acc = _consume(1, x_smem, w_smem, b_smem, s_smem, full, empty, k_lo, k_hi, BLOCK_M, BLOCK_K,
                   STAGES, FMT)
    if BLOCK_M == 256:
        MMA: gl.constexpr = acc_layout(4, 128)
        finish_tile(acc, out_ptr, out_ptr, out_ptr, row0 + 128, rows_left - 128, N, stride_o,
                    bias_ptr, dest_ptr, rw_ptr, HAS_BIAS, False, 1, 64, 128, MMA)
    else:
        red_smem.store(acc)
        cta_barrier()  # (this partition's 128 threads) every store in before the arrive
        mbarrier.arrive(red_bar)


__all__ = ["ROW", "ws_descriptors"]
