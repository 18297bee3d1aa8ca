"""The Gluon wgmma kernel's tile steps (linear_wgmma.py): the cp.async copies of a K tile, the
output store, and the activation QDQ of W*A* layers done inside the kernel (`fuse_act`).

Why the fused QDQ: an eager W4A4 call was two launches and two allocations (the QDQ kernel,
then the GEMM): QdqPlan cost 17 us of the H200 host's time on top of W4A16's 22.7 us a call
(docs/benchmarks.md part 5), and back to back W4A4 still ran 19-21 us past its graph time where
W4A16 ran 7-8 (H100, part 29). Measured (H200 2026-12-02), the fused QDQ as first written lost:
graph 35.2 us against 18.5 for QDQ launch + GEMM at M = 1 on 8192^2, because each program
QDQ'd all block_m rows of its x tile, two warps repeating the other two: 32 elements a thread a
K tile for M = 1's 2 (595 of the K loop's 971 SASS a thread). Now (part 31) it covers only the
rows a plan's calls can have (ACT_ROWS: row 0 alone at M = 1, 422 SASS), spread over every
thread; gated by wgmma_config.ACT_ROWS_VERIFIED. Its steps are `mx_codec.qdq_blocks`, the
function mx_quant's QDQ kernel runs, so the bits are the dispatcher's by construction (checked
on the GPU against the reference and against the unfused path, bit for bit).

ACT_VERIFIED gates it as linear_wgmma's gates do: test_fused_activation_qdq_is_the_dispatchers
passed in the whole-suite H200 run of commit 19d2a90 (2026-12-02 02:53 UTC).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from kernels.select.activation_keys import MX_DYNAMIC_KEYS
from kernels.spec.contract import QuantKey
from kernels.spec.formats import get_format
from kernels.triton import launcher
from kernels.triton.fp4_words import ALIGN, CHUNK_K
from kernels.triton.mx_codec import ROUNDING_CODE, format_constexprs, qdq_blocks

ACT_VERIFIED = True

# triton 3.6 (the H200) names it async_copy_global_to_shared; 3.9 (CPU CI) async_load
_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier  # (3.9: barrier)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared  # (3.9 / 3.6)
_REINTERPRET = gl.constexpr(hasattr(gl.shared_memory_descriptor, "reinterpret"))  # (3.9; 3.6: _)
# A 128-byte-swizzled bf16 tile's 64-column blocks, each [rows, 64] in turn, unswizzled
_PLAIN = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))


@gluon.jit
def reinterpret(slot, dtype: gl.constexpr, shape: gl.constexpr, layout: gl.constexpr):
    """A shared buffer seen as another dtype / shape / layout over the same bytes."""
    if _REINTERPRET:
        view = slot.reinterpret(dtype, shape, layout)
    else:
        view = slot._reinterpret(dtype, shape, layout)
    return view


@gluon.jit
def grid_wait():
    """Wait until the grids this one depends on have finished and their writes are visible: a
    kernel launched programmatically (grid_dependency) runs it before it reads what they write
    (the weight copies, which no kernel writes, may go first)."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def store_out(acc, out_ptr, orow, cols, row0, rows_left, N, stride_o, bias_ptr, dest_ptr, rw_ptr,
              HAS_BIAS: gl.constexpr, GROUPED: gl.constexpr):
    """Dense: acc (+ bias) as bf16 to out[row0 + col, orow]. Grouped (MoE): acc * the row's
    routing weight, fp32, to out[dest[row0 + col], orow] (each row written by one program)."""
    omask = (orow < N)[:, None] & (cols < rows_left)[None, :]
    if GROUPED:
        dest = gl.load(dest_ptr + row0 + cols, mask=cols < rows_left, other=0)
        rw = gl.load(rw_ptr + row0 + cols, mask=cols < rows_left, other=0.0)
        gl.store(out_ptr + dest.to(gl.int64)[None, :] * stride_o + orow[:, None],
                 acc * rw[None, :], mask=omask)
    else:
        if HAS_BIAS:
            acc = acc + gl.load(bias_ptr + orow, mask=orow < N, other=0.0)[:, None]
        gl.store(out_ptr + (row0 + cols).to(gl.int64)[None, :] * stride_o + orow[:, None],
                 acc.to(gl.bfloat16), mask=omask)


@gluon.jit
def tile_ids(GROUP_M: gl.constexpr = 1):
    """(weight tile, M tile) of this program, from its grid (N tiles, M tiles, K slices).
    GROUP_M 1: the grid's own order (axis 0, N, fastest). GROUP_M > 1: programs in launch order
    walk N in bands of GROUP_M M tiles, so the programs resident at once share each weight tile
    (read from DRAM once a band, not once an M tile) and GROUP_M x tiles stay in L2. A bijection
    of the grid: every (N tile, M tile) is one program's."""
    if GROUP_M == 1:
        pid_n = gl.program_id(0)
        pid_m = gl.program_id(1)
    else:
        pid_n, pid_m = tile_at(gl.program_id(1) * gl.num_programs(0) + gl.program_id(0),
                               gl.num_programs(0), gl.num_programs(1), GROUP_M)
    return pid_n, pid_m


@gluon.jit
def tile_at(t, grid_n, grid_m, GROUP_M: gl.constexpr = 1):
    """(weight tile, M tile) of output tile t in launch order over a grid_n x grid_m grid of
    them: N fastest (GROUP_M 1), or in bands of GROUP_M M tiles (`tile_ids`); the persistent
    kernel's order over the tiles it walks (linear_wgmma_ws, `WgmmaConfig.persistent`)."""
    if GROUP_M == 1:
        pid_n = t % grid_n
        pid_m = t // grid_n
    else:
        band = t // (GROUP_M * grid_n)
        first_m = band * GROUP_M
        rows = gl.minimum(grid_m - first_m, GROUP_M)  # M tiles in this band (the last: fewer)
        within = t - band * (GROUP_M * grid_n)
        pid_m = first_m + within % rows
        pid_n = within // rows
    return pid_n, pid_m


@gluon.jit
def finish_tile(acc, out_ptr, part_ptr, lock_ptr, row0, rows_left, N, stride_o, bias_ptr,
                dest_ptr, rw_ptr, HAS_BIAS: gl.constexpr, GROUPED: gl.constexpr,
                SPLIT: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                MMA: gl.constexpr, PARTS: gl.constexpr = 1, PART: gl.constexpr = 0,
                GROUP_M: gl.constexpr = 1):
    """A program's accumulator [BLOCK_N, BLOCK_M] (layout MMA; grid (N tiles, M tiles, K
    slices)) to the output (`store_out`); with split-K the partial is parked and the last slice
    of the output tile to finish adds them up in slice order (deterministic; an atomic counter
    a tile, self-resetting; the partials in linear_mma.workspace). PARTS > 1: a program's
    weight rows are PARTS blocks of BLOCK_N, each finished by its own partition (PART: which;
    the wide ws tile's consumers), each an output tile of its own. GROUP_M: the program order
    (`tile_ids`); the split-K slot of a tile is its grid position, whichever tile it holds."""
    pid_n, _ = tile_ids(GROUP_M)
    finish_tile_at(pid_n, acc, out_ptr, part_ptr, lock_ptr, row0, rows_left, N, stride_o,
                   bias_ptr, dest_ptr, rw_ptr, HAS_BIAS, GROUPED, SPLIT, BLOCK_N, BLOCK_M, MMA,
                   PARTS, PART)


@gluon.jit
def finish_tile_at(pid_n, acc, out_ptr, part_ptr, lock_ptr, row0, rows_left, N, stride_o,
                   bias_ptr, dest_ptr, rw_ptr, HAS_BIAS: gl.constexpr, GROUPED: gl.constexpr,
                   SPLIT: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                   MMA: gl.constexpr, PARTS: gl.constexpr = 1, PART: gl.constexpr = 0):
    """`finish_tile` of weight tile pid_n (the persistent kernel's: its tile, not its grid
    position; SPLIT 1 there)."""
    rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, MMA))
    cols = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, MMA))
    orow = (pid_n * PARTS + PART) * BLOCK_N + rows  # output features
    if SPLIT > 1:
        tile = (gl.program_id(1) * gl.num_programs(0) + gl.program_id(0)) * PARTS + PART
        tile_elems = gl.num_programs(1) * gl.num_programs(0) * (PARTS * BLOCK_N * BLOCK_M)
        local = part_ptr + tile * (BLOCK_N * BLOCK_M) + rows[:, None] * BLOCK_M + cols[None, :]
        gl.store(local + gl.program_id(2) * tile_elems, acc)
        cta_barrier()
        done = gl.atomic_add(lock_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if done == SPLIT - 1:
            acc = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, MMA)
            for s in gl.static_range(SPLIT):  # slice order: deterministic
                acc += gl.load(local + s * tile_elems, cache_modifier=".cg")
            store_out(acc, out_ptr, orow, cols, row0, rows_left, N, stride_o, bias_ptr,
                      dest_ptr, rw_ptr, HAS_BIAS, GROUPED)
            gl.atomic_xchg(lock_ptr + tile, 0, sem="relaxed", scope="gpu")  # ready for the next
    else:
        store_out(acc, out_ptr, orow, cols, row0, rows_left, N, stride_o, bias_ptr, dest_ptr,
                  rw_ptr, HAS_BIAS, GROUPED)


_K_ALIGN = gl.constexpr(ALIGN[1])
_CHUNK_K = gl.constexpr(CHUNK_K)


@gluon.jit
def layout_chunks(K):
    """The 128-code chunks a 64-row block of the one layout holds (fp4_words.ALIGN: K padded
    to whole ALIGN[1] codes), i.e. the chunk stride of its blocks."""
    return (K + _K_ALIGN - 1) // _K_ALIGN * (_K_ALIGN // _CHUNK_K)


@gluon.jit
def expert_rows(grp_ptr, slot, e, E, BLOCK_M: gl.constexpr):
    """(first activation row, rows left) of MoE tile-table slot `slot` of expert e (< E): the
    table is moe_routing.sort_rows' [expert | M tile | first row of expert | rows of expert],
    int32, each part one entry a slot (a program along grid axis 1)."""
    slots = gl.num_programs(1)
    m_tile = gl.load(grp_ptr + slots + slot)
    row0 = gl.load(grp_ptr + 2 * slots + e) + m_tile * BLOCK_M
    return row0, gl.load(grp_ptr + 2 * slots + E + e) - m_tile * BLOCK_M


@gluon.jit
def weight_ring(STAGES: gl.constexpr, G: gl.constexpr, NBH: gl.constexpr, FMT: gl.constexpr):
    """A ring of STAGES shared slots for a K tile's words, B words (mxfp6: half a word each,
    mxfp8: a whole one; none for mxfp4) and scale bytes, each in the prepared layout's own
    order (chunk b_hi, group w, then within a chunk: words [h][g][t][b_lo], scale bytes
    [g][h][b_lo]), so a 64-row tile is one contiguous run of it (cp.async vectors, or one TMA
    box); a lane's 16-byte vectors lie side by side along (g, t)."""
    WS: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [5, 2, 1, 3, 0, 4])
    SS: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [4, 2, 1, 0, 3])
    w_smem = gl.allocate_shared_memory(gl.int32, [STAGES, G, 8, 4, 2, NBH, 4], WS)
    b_smem = gl.allocate_shared_memory(gl.int32, [STAGES, G, 8, 4, 2, NBH, 4 if FMT >= 3 else 2]
                                       if FMT else [1, 1, 1, 1, 1, 1, 2], WS)
    s_smem = gl.allocate_shared_memory(gl.uint8, [STAGES, G, 8, 2, NBH, 4], SS)
    return w_smem, b_smem, s_smem


@gluon.jit
def x_mask(xmask, xc, t, K, BLOCK_K: gl.constexpr, K_TAIL: gl.constexpr):
    """The x tile t's copy mask: rows in range, and (K_TAIL: K is not whole tiles) columns < K
    (the rest is zero-filled, against the layout's zero padding)."""
    if K_TAIL:
        xmask = xmask & ((xc + t * BLOCK_K) < K)[None, :]
    return xmask


@gluon.jit
def copy_tile(w_buf, b_buf, s_buf, x_buf, w_src, b_src, s_src, x_src, xmask, xc, x_bar, t, K,
              row0, BLOCK_K: gl.constexpr, K_TAIL: gl.constexpr, FMT: gl.constexpr,
              X_TMA: gl.constexpr):
    """K tile t's copies into a ring slot: words, mxfp6 / mxfp8 B words and scale bytes by
    cp.async (one group); the x tile by cp.async too (x_src: the tile's pointers, xmask / xc
    its rows / columns), or (X_TMA) by one TMA copy of x_src, a descriptor of x, at (row0,
    t * BLOCK_K), completing on x_bar (rows past M and columns past K zero-filled)."""
    copy_weight_tile(w_buf, b_buf, s_buf, w_src, b_src, s_src, FMT)
    copy_x_tile(x_buf, x_src, xmask, xc, x_bar, t, K, row0, BLOCK_K, K_TAIL, X_TMA)


@gluon.jit
def copy_weight_tile(w_buf, b_buf, s_buf, w_src, b_src, s_src, FMT: gl.constexpr):
    """copy_tile's weight copies (cp.async, not committed: the x copy's group takes them)."""
    _async_load(w_buf, w_src)
    if FMT:
        _async_load(b_buf, b_src)
    _async_load(s_buf, s_src)


@gluon.jit
def copy_x_tile(x_buf, x_src, xmask, xc, x_bar, t, K, row0, BLOCK_K: gl.constexpr,
                K_TAIL: gl.constexpr, X_TMA: gl.constexpr):
    """copy_tile's x copy, then the commit of the thread's cp.async group."""
    if X_TMA:
        mbarrier.expect(x_bar, x_src.block_type.nbytes)
        _tma_load(x_src, [row0, t * BLOCK_K], x_bar, x_buf)
    else:
        _async_load(x_buf, x_src + t * BLOCK_K, mask=x_mask(xmask, xc, t, K, BLOCK_K, K_TAIL))
    async_copy.commit_group()


class XDesc:
    """The x operand of an X_TMA launch as Triton's CUDA launcher reads a tensor descriptor
    (base, shape, strides, padding; the box and the swizzle are the compiled kernel's): built
    per call (x's pointer and M change), cheaper than a validated TensorDescriptor."""

    __slots__ = ("base", "shape", "strides", "padding")

    def __init__(self, x2d: Tensor) -> None:
        self.base, self.shape, self.strides = x2d, list(x2d.shape), list(x2d.stride())
        self.padding = "zero"

    @classmethod
    def rows(cls, base: Tensor, m: int, k: int) -> "XDesc":
        """The m rows of K of a contiguous `base` of any rank as [m, k], without a 2-D view
        (eager_path: no view a call)."""
        desc = cls.__new__(cls)
        desc.base, desc.shape, desc.strides, desc.padding = base, [m, k], [k, 1], "zero"
        return desc


def x_descriptor(x2d: Tensor, block_m: int, block_k: int):
    """The first launch's x descriptor (Triton specializes the kernel on its box and layout):
    [block_m, block_k] boxes of x2d in the kernel's x_smem layout (128-byte swizzle)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return TensorDescriptor.from_tensor(x2d, [block_m, block_k], X_SMEM)


X_SMEM = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)


def act_facts(key: Optional[QuantKey]) -> tuple:
    """The kernel's ACT constexpr for an activation key: (MBITS, BIAS, EMAX, MAX_NORMAL,
    MAXN_MANT, MAXN_SUB, IS_INT, ROUNDING) of a dynamic MX key, () for any other (weight-only,
    or a static fp8 key: QDQ'd before the kernel)."""
    if key is None or key not in MX_DYNAMIC_KEYS:
        return ()
    f = format_constexprs(get_format(key.format))
    return (f["MBITS"], f["BIAS"], f["EMAX"], f["MAX_NORMAL"], f["MAXN_MANT"], f["MAXN_SUB"],
            f["IS_INT"], ROUNDING_CODE[key.scale.rounding])


@gluon.constexpr_function
def qdq_rows(act_rows, block_m):
    """The x rows a program's fused QDQ covers: ACT_ROWS (wgmma_config.act_rows), or all
    block_m where it is 0."""
    return act_rows if act_rows else block_m


@gluon.constexpr_function
def qdq_layout(rows, cols, warps):
    """The fused QDQ's layout of a [rows, cols] view of the x tile (`_qdq_rows_view`): up to 8
    consecutive elements a thread, lanes along a row first, so that no two threads hold one
    element where the view has one for each (M = 1's 256 elements: 2 a thread, 16 lanes a
    32-element block)."""
    each = max(1, min(8, rows * cols // (32 * warps)))
    lanes = min(32, cols // each)
    warps_k = max(1, min(warps, cols // (each * lanes)))
    return gl.BlockedLayout([1, each], [32 // lanes, lanes], [warps // warps_k, warps_k], [1, 0])


@gluon.jit
def _qdq_rows_view(t, ROWS: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr):
    """The first ROWS rows of an X_SMEM tile [BLOCK_M, BLOCK_K] as a 2-D view whose rows hold
    whole 32-element blocks. ROWS 1: row 0 of each 64-column block, [BLOCK_K // 64, 64]; the
    128-byte swizzle XORs a row's 16-byte chunks by the row's index, so row 0's are in order
    (tests/kernels/triton/test_wgmma_compile.py checks X_SMEM's address map). Gluon slices no
    fewer than the swizzle's 8 rows; ROWS >= 8: the rows as they are."""
    if ROWS == 1:
        view = reinterpret(t, gl.bfloat16, [BLOCK_K // 64, BLOCK_M * 64], _PLAIN).slice(0, 64, 1)
    elif ROWS < BLOCK_M:
        view = t.slice(0, ROWS)
    else:
        view = t
    return view


@gluon.jit
def qdq_x_tile(src, dst, ROWS: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr,
               WARPS: gl.constexpr, ACT: gl.constexpr):
    """dst = the dynamic MX QDQ of the bf16 x tile in src (shared [BLOCK_M, BLOCK_K]), its first
    ROWS rows (wgmma_config.act_rows: the rows a call can have; dst's others stay as they
    are), cast to bf16 by the GPU's RNE convert as the QDQ kernel's store. The layout spreads
    those rows over every thread (`qdq_layout`): at M = 1 a thread QDQs 1-4 elements a tile,
    not 8 rows' worth."""
    src = _qdq_rows_view(src, ROWS, BLOCK_M, BLOCK_K)
    dst = _qdq_rows_view(dst, ROWS, BLOCK_M, BLOCK_K)
    R: gl.constexpr = src.shape[0]
    C: gl.constexpr = src.shape[1]
    QL: gl.constexpr = qdq_layout(R, C, WARPS)
    x = gl.reshape(src.load(QL).to(gl.float32), [R, C // 32, 32])
    q = qdq_blocks(x, 1, ACT[0], ACT[1], ACT[2], ACT[3], ACT[4], ACT[5], ACT[6], ACT[7])
    dst.store(gl.reshape(q, [R, C]).to(gl.bfloat16))


def copyable_rows(x2d: Tensor) -> Tensor:
    """x2d, or an aligned copy of it: cp.async copies x in 16-byte vectors, which needs rows
    Triton knows to be aligned (`launcher.rows_aligned`; a row stride of 8 mod 16 does not
    compile); a view at an odd offset or row stride is copied."""
    if not launcher.rows_aligned(x2d):
        return x2d.clone(memory_format=torch.contiguous_format)
    return x2d


__all__ = ["ACT_VERIFIED", "X_SMEM", "XDesc", "act_facts", "copy_tile", "copy_weight_tile",
           "copy_x_tile", "copyable_rows", "cta_barrier", "expert_rows", "finish_tile",
           "finish_tile_at", "grid_wait", "layout_chunks", "qdq_layout", "qdq_rows",
           "qdq_x_tile", "reinterpret", "store_out", "tile_at", "tile_ids", "weight_ring",
           "x_descriptor", "x_mask"]
