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
  wgmma_gates.WIDE_M_VERIFIED): 128 weight rows a program, 64 a consumer (two blocks of the
  layout, each in its own ring), both consumers on every K tile and on all 256 activation rows
  of the one x tile (wgmma N = 256), each storing its own 64 output features. Against 64 rows
  a program (tried first: both consumers decoding the same tile, 128 activation rows each —
  0.62-0.84x bf16 at M = 1024 / 4096, benchmarks part 15) a decoded tile feeds twice the
  tensor-core work and an x tile twice the weight rows: cuBLAS's 128 x 256 tile, the weight
  decoded into the A registers; split-K with each consumer's rows an output tile of their own
  (`finish_tile`'s parts); MoE experts too (an expert's N is padded to 128).

The kernel takes the one-partition kernel's parameters (so run_wgmma and its `launcher.Bound`,
and moe_wgmma's launch, serve both): the weight operands are TMA descriptors
(`ws_descriptors`), x a descriptor as with `tma_x`; GROUPED runs MoE experts off the same tile
table; the parts it has no use for (fused QDQ, K halves, rep, two warpgroups) must be off
(`WgmmaConfig` refuses them with ws). Gated (`wgmma_gates.WS_VERIFIED`) until its GPU tests
passed in a whole-suite run; CPU CI compiles it for sm_90a (the copies, the bytes each slot
expects, setmaxnreg, no spills) and checks the descriptors and the launches.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                              warpgroup_mma, warpgroup_mma_wait)

from kernels.triton.wgmma_config import BLOCK_M_WIDE
from kernels.triton.wgmma_decode import acc_layout, decode, slot_operands, words_layout
from kernels.triton.wgmma_tiles import (X_SMEM, _tma_load, cta_barrier, expert_rows, finish_tile,
                                        finish_tile_at, grid_wait, layout_chunks, reinterpret,
                                        tile_at, tile_ids, weight_ring)

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
_WIDE_M = gl.constexpr(BLOCK_M_WIDE)  # the wide tile's BLOCK_M (the module docstring)


@gluon.jit
def _as_box(slot, dtype: gl.constexpr, rows: gl.constexpr, layout: gl.constexpr):
    """A ring slot (the consumers' view) as the [rows, ROW] box its TMA copy writes."""
    return reinterpret(slot, dtype, [rows, _ROW], layout)


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
                      X_TMA: gl.constexpr = True, PDL: gl.constexpr = False,
                      ACT_ROWS: gl.constexpr = 0, OVERLAP: gl.constexpr = False,
                      GROUP_M: gl.constexpr = 1, PERSIST: gl.constexpr = False,
                      X_STAGES: gl.constexpr = 0):
    """x_ptr: TMA descriptor of x [M, K] ([BLOCK_M, BLOCK_K] boxes); w_ptr / b_ptr / s_ptr:
    `ws_descriptors`. Grid (N / 64, M tiles, K slices); launched with 4 warps (the first
    consumer; the second and the loader are warp_specialize's workers). GROUPED (MoE experts,
    moe_wgmma): the one-partition kernel's tile table and operands (x the rows in expert
    order; the descriptors span every expert, stride_we words an expert). PDL: as the
    one-partition kernel's: the loader issues the first ring's weight copies, then waits for
    the activation QDQ before its first x copy (`_loader`). GROUP_M: the programs' order over
    the output tiles (wgmma_tiles.tile_ids: bands of M tiles sharing each weight tile in L2).
    PERSIST (the wide tile, dense, no split; `WgmmaConfig.persistent`): a grid of at most one
    program an SM, each walking the output tiles t = program, program + programs, ... in
    tile_at's order, the ring running on from tile to tile (`_persistent_loader`).
    X_STAGES (PERSIST only; 0: STAGES): x tiles in a ring of their own, X_STAGES > STAGES
    deep, each copied X_STAGES - STAGES K tiles ahead of its weights (`_split_loader`): a
    third 64 KB x slot fits beside two slots of 8-bit or mxfp6 weights (WgmmaConfig.x_stages
    says why)."""
    gl.static_assert(not (PDL and GROUPED))
    gl.static_assert(not PERSIST or (BLOCK_M == _WIDE_M and SPLIT == 1 and not GROUPED))
    gl.static_assert(GROUP_M == 1 or not GROUPED)
    gl.static_assert(X_STAGES == 0 or (PERSIST and X_STAGES > STAGES))
    gl.static_assert(WARPS == 4 and REP == 1 and SUB_K == 1 and X_TMA)
    # BLOCK_M 256 (large M): 128 weight rows, consumer C the layout's block 2 * pid + C in its
    # own ring, both on every K tile and all 256 rows (the module docstring)
    WIDE: gl.constexpr = BLOCK_M == _WIDE_M
    gl.static_assert(len(ACT) == 0 and not OVERLAP)  # (WgmmaConfig says why)
    gl.static_assert(STAGES % 2 == 0 or WIDE)  # (WgmmaConfig says why)
    ktiles = (K + BLOCK_K - 1) // BLOCK_K
    k_lo = gl.program_id(2) * TILES_PER_SPLIT
    k_hi = gl.minimum(k_lo + TILES_PER_SPLIT, ktiles)
    # the program's first K tile in the weight's layout (fp4_words.ALIGN: a 64-row block holds
    # K padded to whole tiles of any BLOCK_K)
    block_tiles = layout_chunks(K) // (BLOCK_K // 128)  # K tiles a 64-row block
    pid_n, pid_m = tile_ids(GROUP_M)
    tile0 = pid_n * (2 if WIDE else 1) * block_tiles
    row0 = pid_m * BLOCK_M
    rows_left = M - row0
    if GROUPED:  # the tile table as the one-partition kernel's (linear_wgmma); a slot past the
        e = gl.load(grp_ptr + gl.program_id(1))  # last tile runs no K tile and stores nothing
        live = e < E  # (no early return: the partitions are not forked yet)
        e = gl.minimum(e, E - 1)
        row0, rows_left = expert_rows(grp_ptr, gl.program_id(1), e, E, BLOCK_M)
        rows_left = gl.where(live, rows_left, 0)
        k_hi = gl.where(live, k_hi, k_lo)
        tile0 += e * (stride_we // (8 * BLOCK_K))  # an expert's words: whole 64-row tiles
    # a 64-row block's slots (WIDE: the second consumer's block in slots STAGES ..)
    w_smem, b_smem, s_smem = weight_ring(STAGES * (2 if WIDE else 1), 4, BLOCK_K // 128, FMT)
    XS: gl.constexpr = X_STAGES if X_STAGES else STAGES
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [XS, BLOCK_M, BLOCK_K], X_SMEM)
    red_smem = gl.allocate_shared_memory(gl.float32, [64, 16 if WIDE else BLOCK_M],
                                         gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    red_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=2 if WIDE else 1)  # (WIDE: both read a slot)
    mbarrier.init(red_bar, count=1)
    if X_STAGES:  # the x ring's own "full" barriers (released with the weights: _split_loader)
        xfull = gl.allocate_shared_memory(gl.int64, [X_STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(X_STAGES):
            mbarrier.init(xfull.index(s), count=1)
    else:  # one ring: x completes on its weights' barriers
        xfull = full
    fence_async_shared()  # the inits before any TMA copy completes on them
    if PERSIST:
        gl.warp_specialize([
            (_persistent_consumer, (0, x_smem, w_smem, b_smem, s_smem, full, empty, xfull,
                                    bias_ptr, out_ptr, M, N, K, stride_o, HAS_BIAS, BLOCK_M,
                                    BLOCK_K, STAGES, FMT, GROUP_M, X_STAGES)),
            (_persistent_consumer, (1, x_smem, w_smem, b_smem, s_smem, full, empty, xfull,
                                    bias_ptr, out_ptr, M, N, K, stride_o, HAS_BIAS, BLOCK_M,
                                    BLOCK_K, STAGES, FMT, GROUP_M, X_STAGES)),
            (_persistent_loader, (x_ptr, w_ptr, b_ptr, s_ptr, x_smem, w_smem, b_smem, s_smem,
                                  full, empty, xfull, M, N, K, BLOCK_M, BLOCK_K, STAGES, FMT,
                                  PDL, GROUP_M, X_STAGES)),
        ], [4, 1], [WREGS, LOADER_REGS])
    else:
        gl.warp_specialize([
            (_first_consumer, (x_smem, w_smem, b_smem, s_smem, full, empty, red_smem, red_bar,
                               bias_ptr, out_ptr, part_ptr, lock_ptr, dest_ptr, rw_ptr, row0,
                               rows_left, N, stride_o, k_lo, k_hi, HAS_BIAS, GROUPED, SPLIT,
                               BLOCK_M, BLOCK_K, STAGES, FMT, GROUP_M)),
            (_second_consumer, (x_smem, w_smem, b_smem, s_smem, full, empty, red_smem, red_bar,
                                bias_ptr, out_ptr, part_ptr, lock_ptr, dest_ptr, rw_ptr, row0,
                                rows_left, N, stride_o, k_lo, k_hi, HAS_BIAS, GROUPED, SPLIT,
                                BLOCK_M, BLOCK_K, STAGES, FMT, GROUP_M)),
            (_loader, (x_ptr, w_ptr, b_ptr, s_ptr, x_smem, w_smem, b_smem, s_smem, full,
                       empty, row0, tile0, block_tiles, k_lo, k_hi, BLOCK_M, BLOCK_K, STAGES,
                       FMT, PDL)),
        ], [4, 1], [WREGS, LOADER_REGS])


@gluon.jit
def _loader(x_desc, w_desc, b_desc, s_desc, x_smem, w_smem, b_smem, s_smem, full, empty, row0,
            tile0, block_tiles, k_lo, k_hi, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr,
            STAGES: gl.constexpr, FMT: gl.constexpr, PDL: gl.constexpr = False):
    """One warp: K tile kk into slot (kk - k_lo) % STAGES once its consumer released it (a
    fresh "empty" barrier passes the first round: parity 1); BLOCK_M 256: the tile of both
    64-row blocks, the second's weight operands in slot STAGES + that. PDL: the first round's
    weight copies, then the wait for the activation QDQ (grid_dependency), then their x."""
    XB: gl.constexpr = BLOCK_M * BLOCK_K * 2
    first = k_lo
    if PDL:  # the first round (fresh slots: no "empty" wait), weights before the wait
        first = gl.minimum(k_lo + STAGES, k_hi)
        for kk in range(k_lo, first):
            _load_weights(w_desc, b_desc, s_desc, w_smem, b_smem, s_smem, full, kk - k_lo,
                          tile0, block_tiles, kk, XB, BLOCK_M, BLOCK_K, STAGES, FMT)
        grid_wait()
        for kk in range(k_lo, first):
            _tma_load(x_desc, [row0, kk * BLOCK_K], full.index(kk - k_lo),
                      x_smem.index(kk - k_lo))
    for kk in range(first, k_hi):
        i = kk - k_lo
        s = i % STAGES
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
        _load_weights(w_desc, b_desc, s_desc, w_smem, b_smem, s_smem, full, s, tile0,
                      block_tiles, kk, XB, BLOCK_M, BLOCK_K, STAGES, FMT)
        _tma_load(x_desc, [row0, kk * BLOCK_K], full.index(s), x_smem.index(s))


@gluon.jit
def _load_weights(w_desc, b_desc, s_desc, w_smem, b_smem, s_smem, full, s, tile0, block_tiles,
                  kk, XB: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr,
                  STAGES: gl.constexpr, FMT: gl.constexpr):
    """K tile kk's weight copies into slot s, its barrier told the tile's bytes (x's too: XB)."""
    WIDE: gl.constexpr = BLOCK_M == _WIDE_M
    WR: gl.constexpr = 8 * BLOCK_K // _ROW  # rows of a tile's words in their flat view
    BR: gl.constexpr = WR if FMT >= 3 else WR // 2
    SR: gl.constexpr = 2 * BLOCK_K // _ROW
    WB: gl.constexpr = ((WR + BR) * 4 if FMT else WR * 4) * _ROW + SR * _ROW  # a block's bytes
    bar = full.index(s)
    mbarrier.expect(bar, XB + WB * (2 if WIDE else 1))
    for c in gl.static_range(2 if WIDE else 1):
        t = tile0 + c * block_tiles + kk
        slot = c * STAGES + s
        if FMT:
            _tma_load(b_desc, [t * BR, 0], bar, _as_box(b_smem.index(slot), gl.int32, BR,
                                                        W_FLAT))
        _tma_load(w_desc, [t * WR, 0], bar, _as_box(w_smem.index(slot), gl.int32, WR,
                                                    W_FLAT))
        _tma_load(s_desc, [t * SR, 0], bar, _as_box(s_smem.index(slot), gl.uint8, SR,
                                                    S_FLAT))


@gluon.jit
def _consume(C: gl.constexpr, x_smem, w_smem, b_smem, s_smem, full, empty, k_lo, k_hi,
             BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
             FMT: gl.constexpr, i0=0, xfull=None, X_STAGES: gl.constexpr = 0):
    """Consumer C's sum over the K tiles k_lo + C, k_lo + C + 2, ... of its 64 rows and the
    program's BLOCK_M activation rows; BLOCK_M 256: over every K tile, its own 64 rows. i0:
    the ring position of tile k_lo (the persistent kernel's: the K tiles of its earlier
    output tiles). X_STAGES: x from a ring of its own (xfull; released with the weights'
    slot, `_split_loader`), waited for with the weights; its slot and parity carried (a
    modulo by 3 a K tile cost the loop 9-29 instructions a thread)."""
    WIDE: gl.constexpr = BLOCK_M == _WIDE_M
    NBH: gl.constexpr = BLOCK_K // 128
    WL: gl.constexpr = words_layout(4, NBH)
    SL: gl.constexpr = gl.SliceLayout(2, WL)
    MMA: gl.constexpr = acc_layout(4, BLOCK_M)
    A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    acc = gl.zeros([64, BLOCK_M], gl.float32, MMA)
    if X_STAGES:  # (persistent: i0 a run-time count, the loop's step 1)
        xs = i0 % X_STAGES
        x_phase = (i0 // X_STAGES) & 1
    for kk in range(k_lo + (0 if WIDE else C), k_hi, 1 if WIDE else 2):
        i = i0 + kk - k_lo
        s = i % STAGES
        mbarrier.wait(full.index(s), (i // STAGES) & 1)
        if X_STAGES:  # (before the decode: a wait between it and the wgmma made ptxas move
            mbarrier.wait(xfull.index(xs), x_phase)  # the A registers, 18 moves a K tile)
            x_slot = xs
        else:
            x_slot = s
        ws = C * STAGES + s if WIDE else s  # the slot of the consumer's weight rows
        words, bw, base, sword = slot_operands(w_smem.index(ws), b_smem.index(ws),
                                               s_smem.index(ws), WL, SL, 4, NBH, FMT)
        a = decode(words, bw, base, sword, 64, BLOCK_K, A, FMT)
        acc = warpgroup_mma(a, x_smem.index(x_slot).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])  # (A registers: see the module)
        mbarrier.arrive(empty.index(s))  # every thread's reads of the slot are done
        if X_STAGES:
            wrap = (xs == X_STAGES - 1).to(gl.int32)
            xs = xs + 1 - X_STAGES * wrap
            x_phase = x_phase ^ wrap
    return acc


@gluon.jit
def _first_consumer(x_smem, w_smem, b_smem, s_smem, full, empty, red_smem, red_bar, bias_ptr,
                    out_ptr, part_ptr, lock_ptr, dest_ptr, rw_ptr, row0, rows_left, N, stride_o,
                    k_lo, k_hi, HAS_BIAS: gl.constexpr, GROUPED: gl.constexpr,
                    SPLIT: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr,
                    STAGES: gl.constexpr, FMT: gl.constexpr, GROUP_M: gl.constexpr = 1):
    """The default partition: the even tiles, then + the second consumer's sum, and the tile's
    output (bias / store / split-K, as the one-partition kernel); BLOCK_M 256: every tile, the
    first 64 weight rows' output."""
    acc = _consume(0, x_smem, w_smem, b_smem, s_smem, full, empty, k_lo, k_hi, BLOCK_M, BLOCK_K,
                   STAGES, FMT)
    if BLOCK_M == _WIDE_M:  # its own 64 weight rows: an output tile of its own (PART 0 of 2)
        finish_tile(acc, out_ptr, part_ptr, lock_ptr, row0, rows_left, N, stride_o, bias_ptr,
                    dest_ptr, rw_ptr, HAS_BIAS, GROUPED, SPLIT, 64, BLOCK_M,
                    acc_layout(4, BLOCK_M), 2, 0, GROUP_M)
    else:
        MMA: gl.constexpr = acc_layout(4, BLOCK_M)
        mbarrier.wait(red_bar, 0)
        acc = acc + red_smem.load(MMA)
        finish_tile(acc, out_ptr, part_ptr, lock_ptr, row0, rows_left, N, stride_o, bias_ptr,
                    dest_ptr, rw_ptr, HAS_BIAS, GROUPED, SPLIT, 64, BLOCK_M, MMA, 1, 0, GROUP_M)


@gluon.jit
def _second_consumer(x_smem, w_smem, b_smem, s_smem, full, empty, red_smem, red_bar, bias_ptr,
                     out_ptr, part_ptr, lock_ptr, dest_ptr, rw_ptr, row0, rows_left, N,
                     stride_o, k_lo, k_hi, HAS_BIAS: gl.constexpr, GROUPED: gl.constexpr,
                     SPLIT: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr,
                     STAGES: gl.constexpr, FMT: gl.constexpr, GROUP_M: gl.constexpr = 1):
    """A worker partition: the odd tiles, its sum handed to the first consumer; BLOCK_M 256:
    every tile, the second 64 weight rows' output (PART 1 of 2)."""
    acc = _consume(1, x_smem, w_smem, b_smem, s_smem, full, empty, k_lo, k_hi, BLOCK_M, BLOCK_K,
                   STAGES, FMT)
    if BLOCK_M == _WIDE_M:
        finish_tile(acc, out_ptr, part_ptr, lock_ptr, row0, rows_left, N, stride_o, bias_ptr,
                    dest_ptr, rw_ptr, HAS_BIAS, GROUPED, SPLIT, 64, BLOCK_M,
                    acc_layout(4, BLOCK_M), 2, 1, GROUP_M)
    else:
        red_smem.store(acc)
        cta_barrier()  # (this partition's 128 threads) every store in before the arrive
        mbarrier.arrive(red_bar)


@gluon.jit
def _tile_grid(M, N, BLOCK_M: gl.constexpr):
    """(weight tiles, M tiles) of the wide tile's output: 128 weight rows (N's layout padded to
    whole 128, `weight_programs`) by BLOCK_M activation rows."""
    return (N + 127) // 128, (M + BLOCK_M - 1) // BLOCK_M


@gluon.jit
def _persistent_loader(x_desc, w_desc, b_desc, s_desc, x_smem, w_smem, b_smem, s_smem, full,
                       empty, xfull, M, N, K, BLOCK_M: gl.constexpr,
                       BLOCK_K: gl.constexpr, STAGES: gl.constexpr, FMT: gl.constexpr,
                       PDL: gl.constexpr, GROUP_M: gl.constexpr, X_STAGES: gl.constexpr = 0):
    """`_loader` over each of the program's output tiles in turn, ring position i running on
    across them, so the next tile's copies land while the consumers store this one's output.
    PDL: the wait for the activation QDQ before any copy. X_STAGES: `_split_loader`."""
    XB: gl.constexpr = BLOCK_M * BLOCK_K * 2
    ktiles = (K + BLOCK_K - 1) // BLOCK_K
    block_tiles = layout_chunks(K) // (BLOCK_K // 128)
    grid_n, grid_m = _tile_grid(M, N, BLOCK_M)
    if PDL:
        grid_wait()
    if X_STAGES:
        _split_loader(x_desc, w_desc, b_desc, s_desc, x_smem, w_smem, b_smem, s_smem, full,
                      empty, xfull, ktiles, block_tiles, grid_n, grid_m, BLOCK_M,
                      BLOCK_K, STAGES, FMT, GROUP_M, X_STAGES)
    else:
        i = 0
        for t in range(gl.program_id(0), grid_n * grid_m, gl.num_programs(0)):
            pid_n, pid_m = tile_at(t, grid_n, grid_m, GROUP_M)
            for kk in range(0, ktiles):
                s = i % STAGES
                mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
                _load_weights(w_desc, b_desc, s_desc, w_smem, b_smem, s_smem, full, s,
                              pid_n * 2 * block_tiles, block_tiles, kk, XB, BLOCK_M, BLOCK_K,
                              STAGES, FMT)
                _tma_load(x_desc, [pid_m * BLOCK_M, kk * BLOCK_K], full.index(s),
                          x_smem.index(s))
                i += 1


@gluon.jit
def _persistent_consumer(C: gl.constexpr, x_smem, w_smem, b_smem, s_smem, full, empty, xfull,
                         bias_ptr, out_ptr, M, N, K, stride_o, HAS_BIAS: gl.constexpr,
                         BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
                         FMT: gl.constexpr, GROUP_M: gl.constexpr, X_STAGES: gl.constexpr = 0):
    """Consumer C of the wide tile over each of the program's output tiles: its 64 weight rows'
    sum over every K tile (`_consume`, the same order as the grid kernel's: the same bits),
    then their output (PART C of 2). C 0 is the default partition (the launched 4 warps)."""
    ktiles = (K + BLOCK_K - 1) // BLOCK_K
    grid_n, grid_m = _tile_grid(M, N, BLOCK_M)
    i0 = 0
    for t in range(gl.program_id(0), grid_n * grid_m, gl.num_programs(0)):
        pid_n, pid_m = tile_at(t, grid_n, grid_m, GROUP_M)
        acc = _consume(C, x_smem, w_smem, b_smem, s_smem, full, empty, 0, ktiles, BLOCK_M,
                       BLOCK_K, STAGES, FMT, i0, xfull, X_STAGES)
        row0 = pid_m * BLOCK_M
        finish_tile_at(pid_n, acc, out_ptr, out_ptr, out_ptr, row0, M - row0, N, stride_o,
                       bias_ptr, out_ptr, out_ptr, HAS_BIAS, False, 1, 64, BLOCK_M,
                       acc_layout(4, BLOCK_M), 2, C)
        i0 += ktiles


@gluon.jit
def _position(p, ktiles, grid_n, grid_m, GROUP_M: gl.constexpr):
    """Ring position p of a persistent program: (pid_n, pid_m, kk) of the output tile it is
    in (its p // ktiles-th, t = program + that * programs) and its K tile."""
    j = p // ktiles
    pid_n, pid_m = tile_at(gl.program_id(0) + j * gl.num_programs(0), grid_n, grid_m, GROUP_M)
    return pid_n, pid_m, p - j * ktiles


@gluon.jit
def _split_loader(x_desc, w_desc, b_desc, s_desc, x_smem, w_smem, b_smem, s_smem, full, empty,
                  xfull, ktiles, block_tiles, grid_n, grid_m, BLOCK_M: gl.constexpr,
                  BLOCK_K: gl.constexpr, STAGES: gl.constexpr, FMT: gl.constexpr,
                  GROUP_M: gl.constexpr, X_STAGES: gl.constexpr):
    """The persistent loader with x in a ring of its own, X_STAGES deep: step p copies ring
    position p's x tile and position q = p - D's weights (D = X_STAGES - STAGES), so an x tile
    is in flight D positions longer than its weights (the 64 KB x tile is most of a
    position's bytes). Both slots were last read at position p - X_STAGES, whose release the
    weights' "empty" barrier of slot q % STAGES tells (the consumers release the two rings
    together): one wait a step, and no barrier of the x ring's own for the release. The
    parity cannot alias: the barrier's next phase is position q's release, and q's weights
    are copied only after this wait."""
    D: gl.constexpr = X_STAGES - STAGES
    XB: gl.constexpr = BLOCK_M * BLOCK_K * 2
    tiles = grid_n * grid_m
    programs = gl.num_programs(0)
    n_pos = (tiles - gl.program_id(0) + programs - 1) // programs * ktiles
    for p in range(0, n_pos + D):
        q = p - D
        if q >= 0:  # (q < STAGES: a fresh barrier, parity 1 passes)
            mbarrier.wait(empty.index(q % STAGES), ((q // STAGES) & 1) ^ 1)
        if p < n_pos:
            pid_n, pid_m, kk = _position(p, ktiles, grid_n, grid_m, GROUP_M)
            xs = p % X_STAGES
            mbarrier.expect(xfull.index(xs), XB)
            _tma_load(x_desc, [pid_m * BLOCK_M, kk * BLOCK_K], xfull.index(xs),
                      x_smem.index(xs))
        if q >= 0:
            pid_n, pid_m, kk = _position(q, ktiles, grid_n, grid_m, GROUP_M)
            _load_weights(w_desc, b_desc, s_desc, w_smem, b_smem, s_smem, full, q % STAGES,
                          pid_n * 2 * block_tiles, block_tiles, kk, 0, BLOCK_M, BLOCK_K, STAGES,
                          FMT)


__all__ = ["ROW", "ws_descriptors"]
