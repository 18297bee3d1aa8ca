"""The Hopper strategy of `triton-emulation` for mxfp4, mxfp6 and mxfp8 e4m3 weights at
M <= 128 ("wgmma"), in Gluon. Decoders: wgmma_decode.py; layouts:
fp4_words.py, fp6_words.py (an mxfp6 code's top 4 bits take mxfp4's words, its low 2 bits B
words), fp8_words.py (a thread's 8 codes in two words); tile steps: wgmma_tiles.py.

Why Gluon: the Triton `mma` kernel (linear_mma.py) decodes the weight well but Triton 3.6 puts
the decoded tile in shared memory before wgmma reads it (`local_alloc`): 4 bytes of shared
traffic per weight code against 0.5 from DRAM, and that, not the DRAM, bounded it (ncu:
docs/benchmarks.md). Gluon (`triton.experimental.gluon`) lets the kernel name the layouts: the
weight is laid out once at prepare (fp4_words.wgmma_layout) so that the 8 codes a thread decodes
from one 32-bit word are exactly 8 of its registers of wgmma's A operand; the decoded tile goes
from the decoder's registers into `warpgroup_mma` with no data movement (the layout conversion
is checked trivial at compile time: `assert_trivial`).

The kernel (swap AB: out^T = W @ x^T; 4 warps = one warpgroup = 64 weight rows a program, or
8 = two warpgroups, 128 rows sharing each x tile: `WgmmaConfig.warps`):
- a ring of STAGES shared-memory buffers filled by cp.async (words, scale bytes, the bf16 x tile;
  rows of x past M are predicated off and only reach accumulator columns that are never stored),
  one CTA barrier per K tile;
- decode: 15 instructions per word of 8 codes (the bit placement of fp4_words.WGMMA_BITS), one
  multiply per scale byte for the scale word;
- wgmma with x^T from shared memory as the B operand, retired in its own K iteration (its A
  registers: see the loop);
- split-K reduced in-kernel by the last slice to finish (as linear_mma: an atomic counter per
  output tile, self-resetting; the partials in linear_mma.workspace): one launch, deterministic.

Scope: bf16 x (raw: W4A16, or W4A4 after the planned activation QDQ or with it inside the
kernel: `fuse_act`), bf16 output, K whole 32-blocks (tiles padded), the layouts' scale ranges,
sm_90. Elsewhere `wgmma_plan` says why
not and the caller takes the table's next strategy; parts written without a GPU stay off until
verified there (wgmma_gates.py). Gluon does not run under TRITON_INTERPRET:
CPU CI checks the layout and the decoder's bit operations through their torch twin
(fp4_words.wgmma_decode, the same instructions step for step) and the GPU tests check the kernel
against reference-emulation. GROUPED: MoE experts (moe_wgmma.py), one tile table slot a program.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                              warpgroup_mma, warpgroup_mma_wait)

from kernels.triton import launcher
from kernels.triton.launcher import aligned
from kernels.triton.linear_mma import workspace
from kernels.triton.linear_wgmma_ws import _ws_linear_kernel
from kernels.triton.wgmma_config import (  # noqa: F401 (re-exported: the kernel's vocabulary)
    BLOCK_M_VERIFIED, BLOCK_M_WIDE, FORMATS, WgmmaConfig, WgmmaPlan, one_layout, weight_format,
    wgmma_plan)
from kernels.triton.wgmma_decode import (acc_layout, along, decode, halves, slot_operands,
                                         words_layout, x_copy_layout)
from kernels.triton import wgmma_gates, wgmma_tiles
from kernels.triton.wgmma_tiles import (X_SMEM, XDesc, copy_tile, copy_weight_tile, copy_x_tile,
                                        copyable_rows, cta_barrier, expert_rows, finish_tile,
                                        grid_wait, layout_chunks, qdq_rows, qdq_x_tile,
                                        weight_ring, x_descriptor)


@gluon.jit(do_not_specialize=["M", "TILES_PER_SPLIT", "E"])
def _wgmma_linear_kernel(x_ptr, w_ptr, b_ptr, s_ptr, bias_ptr, out_ptr, part_ptr, lock_ptr,
                         grp_ptr, dest_ptr, rw_ptr, M, N, K, TILES_PER_SPLIT, E, stride_x,
                         stride_o, stride_we, stride_se,
                         HAS_BIAS: gl.constexpr, SPLIT: gl.constexpr, BLOCK_M: gl.constexpr,
                         BLOCK_K: gl.constexpr, STAGES: gl.constexpr, WARPS: gl.constexpr,
                         K_TAIL: gl.constexpr, GROUPED: gl.constexpr, FMT: gl.constexpr,
                         ACT: gl.constexpr, SUB_K: gl.constexpr = 1, REP: gl.constexpr = 1,
                         X_TMA: gl.constexpr = False, PDL: gl.constexpr = False,
                         ACT_ROWS: gl.constexpr = 0, OVERLAP: gl.constexpr = False,
                         GROUP_M: gl.constexpr = 1, PERSIST: gl.constexpr = False,
                         X_STAGES: gl.constexpr = 0):
    """GROUPED (MoE experts, kernels/triton/moe_wgmma.py): program axis 1 is a slot of the
    tile table grp = [expert of slot | M tile of slot | first row of expert | rows of expert]
    (int32; a slot past the last tile holds expert E and returns at once); x holds the rows in
    expert order, w / s every expert's layout (strides stride_we / stride_se).
    FMT 0: mxfp4 words (w); 3 / 4: mxfp8 e4m3 / mxint8, w codes 0..3 and b_ptr codes 4..7 of
    each thread's 8 (fp8_words / int8_words); 1 / 2: mxfp6 e2m3 / e3m2, w the codes' top bits
    and b_ptr their low bits (fp6_words). ACT: () or an activation's QDQ facts
    (wgmma_tiles.act_facts): the x tile's QDQ in the kernel, into a buffer of its own, before
    the wgmma reads it, on its first ACT_ROWS rows (0: all; wgmma_config.act_rows: the rest,
    rows no call of the plan has, stay zeros). SUB_K 2: each K tile as two halves, the second
    decoded while the first's wgmma is in flight. REP 2: each warpgroup owns two 64-row blocks
    (128 weight rows a warpgroup, two wgmmas a K step on one x tile): the tile's G = WARPS * REP
    groups of 16 rows, warp w holding groups w, w + WARPS.
    X_TMA: x_ptr is a TMA descriptor of x ([M, K], box [BLOCK_M, BLOCK_K]) and each x tile one
    TMA copy completing on its slot's mbarrier (no address math or masks a thread; the wgmma
    reads what the async proxy wrote, so no proxy fence a tile unless ACT rewrites it).
    PDL: launched programmatically after the activation QDQ (grid_dependency): the first
    tiles' weight copies are issued, then the kernel waits for the QDQ before its first x copy
    (the QDQ writes x; it reads nothing this kernel writes, and the kernels before it have
    finished: it was launched as any kernel). Never with GROUPED (its tile table).
    OVERLAP (SUB_K 1, no ACT, an even count of K tiles a slice: wgmma_config.overlap_fits): the
    K loop runs tiles in pairs, each tile's wgmma left in flight under the next tile's decode.
    The two tiles' A operands live in two register sets, each held past the wait that retires
    its wgmma (`_keep`): ptxas does not track an in-flight wgmma's A registers across the back
    edge, and a wait's `deps` does not hold them (benchmarks part 32). The ring refills the slot
    two tiles back, not the one in flight (D = STAGES - 2).
    GROUP_M, PERSIST, X_STAGES: run_wgmma's arguments of the ws kernel (its programs' order,
    persistent programs, x's own ring); 1 / False / 0 here: a call is one M tile
    (WgmmaConfig.group_m / persistent / x_stages)."""
    gl.static_assert(GROUP_M == 1 and not PERSIST and X_STAGES == 0)
    G: gl.constexpr = WARPS * REP  # 16-row groups a tile (the layout's `warps`)
    BLOCK_N: gl.constexpr = 16 * G
    NBH: gl.constexpr = BLOCK_K // 128  # groups of 4 scale blocks
    # the one layout (fp4_words.ALIGN): 64-row blocks, each K padded to whole 512 codes in
    # chunks of 128: a chunk holds 1024 words, 256 scale bytes, 512 / 1024 B words (mxfp6 /
    # mxfp8); a K tile of a block is NBH consecutive chunks, a program G // 4 blocks
    TW: gl.constexpr = 1024 * NBH  # words a block's K tile
    TS: gl.constexpr = 256 * NBH  # scale bytes a block's K tile
    TB: gl.constexpr = TW if FMT >= 3 else TW // 2  # B words a block's K tile
    NB: gl.constexpr = G // 4  # 64-row blocks a program
    D: gl.constexpr = STAGES - 1 - OVERLAP  # prefetch distance (a slot a wgmma in flight)
    WL: gl.constexpr = words_layout(WARPS, NBH)
    MMA: gl.constexpr = acc_layout(WARPS, BLOCK_M)
    A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    XL: gl.constexpr = x_copy_layout(BLOCK_K, WARPS)
    XS: gl.constexpr = X_SMEM
    SL: gl.constexpr = gl.SliceLayout(2, WL)  # scale bytes: the t lanes of a row share them
    pid_n = gl.program_id(0)
    pid_m = gl.program_id(1)
    pid_s = gl.program_id(2)
    row0 = pid_m * BLOCK_M  # the tile's first activation row
    rows_left = M - row0
    if GROUPED:
        e = gl.load(grp_ptr + pid_m)
        if e >= E:
            return
        row0, rows_left = expert_rows(grp_ptr, pid_m, e, E, BLOCK_M)
        w_ptr += e.to(gl.int64) * stride_we
        s_ptr += e.to(gl.int64) * stride_se
        b_ptr += e.to(gl.int64) * (stride_we // (TW // TB))  # mxfp6: half as many B words
    ktiles = (K + BLOCK_K - 1) // BLOCK_K  # the K tiles to run (past K: the layout's zeros)
    chunks = layout_chunks(K)  # 128-code chunks of a 64-row block in the layout
    k_lo = pid_s * TILES_PER_SPLIT
    k_hi = gl.minimum(k_lo + TILES_PER_SPLIT, ktiles)
    # offsets of a program's first K tile: per chunk, words [w][h][g][t][b_lo], scale bytes
    # [w][g][h][b_lo] (rank 5: the t dim reduced away; not a t-replicated rank-6 tensor, whose
    # shared load Triton 3.6 lowers to an ldmatrix that misplaces 8-bit elements); a tile's
    # chunks b_hi, then its blocks (groups w // 4) a block's chunks apart
    w_i, g_i = along(G, 0, 6, WL), along(8, 1, 6, WL)
    t_i, h_i = along(4, 2, 6, WL), along(2, 3, 6, WL)
    bh_i, bl_i = along(NBH, 4, 6, WL), along(4, 5, 6, WL)
    woff = ((w_i // 4) * (chunks * 1024) + bh_i * 1024 + (w_i % 4) * 256 + h_i * 128 + g_i * 16
            + t_i * 4 + bl_i)
    sw_i = along(G, 0, 5, SL)
    soff = ((sw_i // 4) * (chunks * 256) + along(NBH, 3, 5, SL) * 256 + (sw_i % 4) * 64
            + along(8, 1, 5, SL) * 8 + along(2, 2, 5, SL) * 4 + along(4, 4, 5, SL))
    first = (pid_n * NB).to(gl.int64) * chunks  # the program's first block's first chunk
    wbase = w_ptr + first * 1024 + woff
    if FMT >= 3:  # mxfp8 / mxint8: B words in the A words' own order
        bbase = b_ptr + first * 1024 + woff
    else:  # mxfp6: B words per chunk [w][h][g][t][2] (fp6_words)
        BL: gl.constexpr = words_layout(WARPS, NBH, 2)
        bw_i = along(G, 0, 6, BL)
        boff = ((bw_i // 4) * (chunks * 512) + along(NBH, 4, 6, BL) * 512 + (bw_i % 4) * 128
                + along(2, 3, 6, BL) * 64 + along(8, 1, 6, BL) * 8 + along(4, 2, 6, BL) * 2
                + along(2, 5, 6, BL))
        bbase = b_ptr + first * 512 + boff
    sbase = s_ptr + first * 256 + soff
    if X_TMA:  # x_ptr: the descriptor; one mbarrier a ring slot
        xptrs, xmask, xc = x_ptr, 0, 0
        xbar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(xbar.index(s), count=1)
        cta_barrier()  # initialised before any thread expects or waits on them
    else:
        xi = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, XL))
        xc = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, XL))
        xptrs = x_ptr + (row0 + xi).to(gl.int64)[:, None] * stride_x + xc[None, :]
        xmask = (xi < rows_left)[:, None] & (xc >= 0)[None, :]
        xbar = w_ptr  # (unused)

    w_smem, b_smem, s_smem = weight_ring(STAGES, G, NBH, FMT)
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_M, BLOCK_K], XS)
    # the first D tiles (a slice shorter than D re-reads its last tile); PDL: all their weight
    # copies (no kernel writes the weight) before the wait on the QDQ, then their x tiles (the
    # weights ride in the first x tile's cp.async group)
    for s in gl.static_range(D):
        t = gl.minimum(k_lo + s, k_hi - 1)
        copy_weight_tile(w_smem.index(s), b_smem.index(s), s_smem.index(s), wbase + t * TW,
                         bbase + t * TB, sbase + t * TS, FMT)
        if not PDL:
            copy_x_tile(x_smem.index(s), xptrs, xmask, xc, _slot(xbar, s, X_TMA), t, K, row0,
                        BLOCK_K, K_TAIL, X_TMA)
    if PDL:
        grid_wait()
        for s in gl.static_range(D):
            copy_x_tile(x_smem.index(s), xptrs, xmask, xc, _slot(xbar, s, X_TMA),
                        gl.minimum(k_lo + s, k_hi - 1), K, row0, BLOCK_K, K_TAIL, X_TMA)
    QROWS: gl.constexpr = qdq_rows(ACT_ROWS, BLOCK_M)
    if len(ACT) > 0:
        xq_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, BLOCK_K], XS)
        if QROWS < BLOCK_M:  # rows past the QDQ's, once (ordered before the wgmma as its rows)
            xq_smem.store(gl.zeros([BLOCK_M, BLOCK_K], gl.bfloat16, XL))
    acc = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, MMA)
    if OVERLAP:  # the odd K tile's A operand, in flight across the back edge (none at first)
        a_odd = gl.zeros([BLOCK_N, BLOCK_K], gl.bfloat16, A)
    for kk0 in range(k_lo, k_hi, 1 + OVERLAP):
        for h in gl.static_range(1 + OVERLAP):
            kk = kk0 + h
            i = kk - k_lo
            async_copy.wait_group(D - 1)  # tile kk has landed (this thread's copies)
            if X_TMA:  # ... and its x tile (copy i of slot i % STAGES: phase (i // STAGES) & 1)
                mbarrier.wait(xbar.index(i % STAGES), (i // STAGES) & 1)
                if len(ACT) > 0:  # (the QDQ's generic reads of the slot the copy engine
                    fence_async_shared()  # rewrites next: ordered across proxies, cheaply)
            else:
                fence_async_shared()  # ... and is visible to wgmma's async proxy
            cta_barrier()  # every thread's; and every warp is past the wait that retired wgmma
            # kk - 1 (kk - 2 with OVERLAP: the slot refilled below is that one's; frees xq_smem)
            t = gl.minimum(kk + D, k_hi - 1)
            nxt = (i + D) % STAGES
            copy_tile(w_smem.index(nxt), b_smem.index(nxt), s_smem.index(nxt), x_smem.index(nxt),
                      wbase + t * TW, bbase + t * TB, sbase + t * TS, xptrs, xmask, xc,
                      _slot(xbar, nxt, X_TMA), t, K, row0, BLOCK_K, K_TAIL, FMT, X_TMA)
            cur = i % STAGES
            xb = x_smem.index(cur)
            if len(ACT) > 0:  # W*A*: QDQ the x tile here instead of in a launch of its own
                qdq_x_tile(xb, xq_smem, QROWS, BLOCK_M, BLOCK_K, WARPS, ACT)
                fence_async_shared()
                xb = xq_smem
            words, bw, base, sword = slot_operands(w_smem.index(cur), b_smem.index(cur),
                                                   s_smem.index(cur), WL, SL, WARPS, NBH, FMT)
            if len(ACT) > 0:
                cta_barrier()  # every warp's QDQ stores are in before the wgmma reads them
            if SUB_K == 1:
                a = decode(words, bw, base, sword, BLOCK_N, BLOCK_K, A, FMT)
                acc = warpgroup_mma(a, xb.permute((1, 0)), acc, is_async=True)
                if OVERLAP:
                    acc = warpgroup_mma_wait(num_outstanding=1, deps=[acc])
                    if h == 0:
                        a_odd = _keep(a_odd)
                        a_even = a
                    else:
                        a_even = _keep(a_even)
                        a_odd = a
                else:
                    # Retired at once: wgmma reads its A registers while in flight and ptxas
                    # (CUDA 12.8 / 13.0) does not keep them from being reused across the
                    # loop's back edge (the SASS of a plain wait(1) version writes them at the
                    # loop's top; H200: wrong sums at block_m 64 / 128 and wherever 2+ CTAs
                    # share an SM). Overlap comes from the CTAs sharing the SM, and (SUB_K 2)
                    # from the halves below.
                    acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
            else:  # the second half's decode runs under the first half's wgmma; both A halves
                # stay live (the wait's deps) until the wait retires both, within the iteration
                w0, w1 = halves(words, NBH)
                b0, b1 = halves(bw, NBH)
                r0, r1 = halves(base, NBH)
                s0, s1 = halves(sword, NBH)
                HK: gl.constexpr = BLOCK_K // 2
                a0 = decode(w0, b0, r0, s0, BLOCK_N, HK, A, FMT)
                acc = warpgroup_mma(a0, xb.slice(0, HK, dim=1).permute((1, 0)), acc, is_async=True)
                a1 = decode(w1, b1, r1, s1, BLOCK_N, HK, A, FMT)
                acc = warpgroup_mma(a1, xb.slice(HK, HK, dim=1).permute((1, 0)), acc, is_async=True)
                acc, a0, a1 = warpgroup_mma_wait(num_outstanding=0, deps=[acc, a0, a1])
    if OVERLAP:
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
        a_odd = _keep(a_odd)
    async_copy.wait_group(0)
    if X_TMA:  # the D copies issued past the slice's last tile land before the CTA exits
        n_done = k_hi - k_lo
        for j in gl.static_range(D):
            mbarrier.wait(xbar.index((n_done + j) % STAGES), ((n_done + j) // STAGES) & 1)
    finish_tile(acc, out_ptr, part_ptr, lock_ptr, row0, rows_left, N, stride_o, bias_ptr,
                dest_ptr, rw_ptr, HAS_BIAS, GROUPED, SPLIT, BLOCK_N, BLOCK_M, MMA)


@gluon.jit
def _keep(a):
    """a, its registers held to this point (an empty asm that reads and rewrites them, not
    pure: ordered after the wgmma wait before it)."""
    return gl.inline_asm_elementwise("", "=h,0", [a], dtype=gl.bfloat16, is_pure=False, pack=1)


@gluon.jit
def _slot(xbar, s, X_TMA: gl.constexpr):
    """Ring slot s's x mbarrier (X_TMA; else the unused placeholder as it is)."""
    if X_TMA:
        bar = xbar.index(s)
    else:
        bar = xbar
    return bar


def unavailable(device: torch.device, consts: dict, k: int, x_dtype: torch.dtype,
                out_dtype: torch.dtype, cfg: WgmmaConfig, m: int = 1) -> Optional[str]:
    """Why the wgmma strategy cannot run a call of M rows (None: it can)."""
    if m > cfg.block_m and cfg.block_m != BLOCK_M_WIDE:  # (the wide tile: any number of them)
        return f"M={m} rows need one M tile (block_m={cfg.block_m})"
    why = wgmma_gates.gated(cfg)
    if why:
        return why
    if cfg.fuse_act and consts.get("ACT_MODE") and not wgmma_tiles.ACT_VERIFIED:
        return "fuse_act (the activation QDQ in the kernel): written, not yet verified on a GPU"
    fmt = weight_format(consts)
    if fmt is None:
        return "packed mxfp4, mxfp6, mxfp8 e4m3 or mxint8 weights only"
    g = wgmma_gates
    if not {"mxfp6_e2m3": g.FP6_VERIFIED, "mxfp6_e3m2": g.FP6_VERIFIED,
            "mxfp8_e4m3": g.FP8_VERIFIED, "mxint8": g.INT8_VERIFIED}.get(fmt, True):
        return f"{fmt} weights: written, not yet verified on a GPU"
    if x_dtype != torch.bfloat16 or out_dtype != torch.bfloat16:
        return "bf16 x and output only"
    if k % 32:
        return f"K={k} is not whole 32-element blocks"
    if k % cfg.block_k and not wgmma_gates.K_TAIL_VERIFIED:
        return (f"K={k} is not a multiple of the K tile {cfg.block_k} (K tails: written, not yet "
                "verified on a GPU)")
    if device.type != "cuda" or torch.version.hip is not None:
        return "needs an NVIDIA GPU"
    if torch.cuda.get_device_capability(device) != (9, 0):
        return "wgmma is sm_90 only"
    return None


def run_wgmma(plan: WgmmaPlan, x2d: Tensor, out: Tensor, bias: Tensor | None,
              stream: Any = None) -> None:
    """One launch of `plan`: x2d [M, K] bf16 (unit stride along K) into out [M, N] bf16. Calls
    without bias into a dense aligned output (fused_linear's) take the plan's `Bound` for the
    (stream, M tiles) after the first: x, out, M and the two row strides are all that change,
    and no descriptor is encoded again (Triton's launcher encodes each of a ws plan's four on
    every call: the general path's host time at large M). `stream`:
    `launcher.current_stream(plan.device)` where the caller has it (None: looked up here)."""
    x2d = copyable_rows(x2d)
    m = x2d.shape[0]
    cfg = plan.cfg
    tiles = -(-m // cfg.block_m)
    direct = bias is None and out.stride(0) == plan.n and \
        (tiles == 1 or wgmma_gates.TILES_BOUND_VERIFIED)
    if direct:
        stream = stream if stream is not None else launcher.current_stream(plan.device)
        bound = plan.fast.get((stream, tiles))
        optr = out.data_ptr()
        if bound is not None and optr % 16 == 0:
            bound(stream, (XDesc(x2d) if cfg.tma_x else x2d.data_ptr(), optr, m, x2d.stride(0),
                           plan.n))
            return
    grid = (plan.grid_n, tiles, plan.split)
    if cfg.persistent:  # at most a program an SM, each walking output tiles (linear_wgmma_ws)
        grid = (min(plan.grid_n * tiles, sm_count(x2d.device)), 1, 1)
    part, lock = workspace(plan.split * grid[0] * grid[1] * 16 * cfg.groups * cfg.block_m
                           if plan.split > 1 else 1, x2d.device)
    b = bias if bias is not None else lock
    key = (plan.key, aligned(x2d), x2d.stride(0) % 16 == 0, aligned(b), aligned(out),
           out.stride(0) % 16 == 0, b.dtype)
    xa = x_descriptor(x2d, cfg.block_m, cfg.block_k) if cfg.tma_x else x2d
    weight = plan.descs or (plan.words, plan.words if plan.bwords is None else plan.bwords,
                            plan.sbytes)
    args = (xa, *weight, b, out, part, lock, lock, lock, b, m, plan.n, plan.k, plan.per_split, 1,
            x2d.stride(0), out.stride(0), 0, 0, bias is not None, plan.split, cfg.block_m,
            cfg.block_k, cfg.stages, cfg.warps, plan.k % cfg.block_k != 0, False, plan.fmt,
            plan.act, cfg.sub_k, cfg.rep, cfg.tma_x, plan.pdl, plan.act_rows, plan.overlap,
            cfg.group_m, cfg.persistent, cfg.x_stages)
    kernel = _ws_linear_kernel if cfg.ws else _wgmma_linear_kernel
    compiled = launcher.launch(kernel, key, grid, args, num_warps=cfg.warps, num_stages=1,
                               maxnreg=cfg.maxnreg, pdl=plan.pdl)
    if direct and stream is not None and compiled is not None and aligned(out) and \
            not torch.cuda.is_current_stream_capturing():  # capture: the workspace is the graph's
        if len(plan.fast) >= FAST_BOUNDS:  # (a server's many prefill lengths: start over)
            plan.fast.clear()
        plan.fast[(stream, tiles)] = launcher.Bound(compiled, grid, args, _PER_CALL)


def sm_count(device: torch.device) -> int:
    """The device's SMs (the persistent grid's bound), looked up once a device."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    found = _SMS.get(index)
    if found is None:
        found = _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return found


_SMS: dict = {}
# Bounds a plan keeps ((stream, M tiles) pairs: a decode step's M is one tile, prefill's vary;
# past one M tile only once wgmma_gates.TILES_BOUND_VERIFIED)
FAST_BOUNDS = 64
# run_wgmma's per-call arguments of the kernel: x, out, M, x's and out's row strides
_PER_CALL = (0, 5, 11, 16, 17)


__all__ = ["BLOCK_M_VERIFIED", "FORMATS", "WgmmaConfig", "WgmmaPlan", "copyable_rows",
           "run_wgmma", "unavailable", "weight_format", "wgmma_plan"]
