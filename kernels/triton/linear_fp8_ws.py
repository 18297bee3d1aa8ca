"""MXFP8 x MXFP8 on Hopper's fp8 tensor cores, warp-specialized (the fast path of
`triton-fp8-mma` at large M), in Gluon.

Why: sm_90 has fp8 wgmma but no block-scaled MMA. An E8M0 scale covers 32 elements of K, one
fp8 wgmma k-step, so each 32-wide slice is its own wgmma into a fresh fp32 accumulator, and
that partial sum is scaled by 2**(Ea[m] + Eb[n]) (exact: powers of two) and added on the CUDA
cores — 2 FP32 operations an output element a slice against the tensor core's 32 MACs. In the
Triton kernel (linear_fp8_mma.py) the loads, the wgmma and that rescale run one after another
in every warp: 0.23x bf16 at M = 4096 on the H200. Here:
- one loader warp copies, by TMA, each K tile of 128: the activation codes [128, 128] and the
  weight codes [BLOCK_N, 128] as four [rows, 32] boxes each (a 32-byte swizzle: every 32-wide
  slice is a whole wgmma operand of its own), and the tile's scales K-major, as fp32 values
  ([4, 128] of the activation's, [4, BLOCK_N] of the weight's: one box each; decoded from E8M0
  on the host, the weight's once, so a consumer converts nothing) into a ring of STAGES slots
  with full / empty mbarriers;
- two consumer warpgroups, one per 64 activation rows of the program's 128: each issues slice
  j + 1's wgmma before it scales and adds slice j's partial, so the tensor core works while the
  CUDA cores rescale (two partial accumulators in flight, the sum in a third);
- each consumer writes its rows: + bias, one cast to bf16.

Numerics: the fp8 products are exact and summed by the tensor core within a slice (fp32);
slices are added in K order in fp32 — the same math as linear_fp8_mma and, within GEMM
tolerance, the reference (QDQ'd activation x dequantized weight, fp32). A NaN scale byte
(0xFF) scales its block to NaN, byte 0 to 2**-127 (reference.elements.decode_e8m0).

Gated (`VERIFIED`, open since its GPU test passed in a whole-suite H200 run); CPU CI compiles
it for sm_90a and checks the host layout of the scales.
"""
from __future__ import annotations

import torch
from torch import Tensor
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                              warpgroup_mma, warpgroup_mma_wait)

from kernels.reference.elements import decode_e8m0
from kernels.triton.wgmma_tiles import _tma_load, reinterpret

# test_matches_the_reference_and_the_triton_kernel passed in the whole-suite H200 run of b698ccb
# (2026-12-03 17:21 UTC); 395-439 TFLOP/s at M = 1024 / 4096 (0.56-0.64x bf16; the Triton kernel
# measured 0.23x on 2026-11-29), still behind triton-emulation's dequant + cuBLAS (0.77-0.98x).
VERIFIED = True

BLOCK_M = 128  # activation rows a program: two consumers of 64
SLICE = 32  # K a scale block, a wgmma k-step, a TMA box's width
CODES = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=8, rank=2))
SCALES = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2))
FLAT = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [0]))  # a scale slot's values, 1-D
WREGS = gl.constexpr(232)
LOADER_REGS = gl.constexpr(40)


def k_major_scales(scales: Tensor) -> Tensor:
    """E8M0 bytes [rows, K / 32] -> their fp32 values (2**(E - 127), NaN for 0xFF) K-major,
    [K / 32, rows padded to 4] (a TMA box reads 4 K blocks of a tile's rows at once; its row
    stride must be a multiple of 16 bytes). Padding: 0."""
    rows, blocks = scales.shape
    out = torch.zeros((blocks, rows + -rows % 4), dtype=torch.float32, device=scales.device)
    out[:, :rows] = decode_e8m0(scales).t()
    return out


def operands(codes: Tensor, scales: Tensor, rows: int) -> tuple:
    """TMA descriptors of fp8 codes [R, K] ([rows, 32] boxes) and of their E8M0 bytes
    [R, K / 32] as fp32 values made K-major (`k_major_scales`; [4, rows] boxes): one
    operand's pair."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return (TensorDescriptor.from_tensor(codes, [rows, SLICE], CODES.value),
            TensorDescriptor.from_tensor(k_major_scales(scales), [4, rows], SCALES.value))


@gluon.jit
def _fp8_ws_kernel(a_desc, sa_desc, b_desc, sb_desc, bias_ptr, out_ptr, M, N, K, stride_o,
                   HAS_BIAS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """Grid (M tiles of 128, N tiles of BLOCK_N); 4 warps (the first consumer; the second and
    the loader are warp_specialize's workers); out [M, N] bf16."""
    gl.static_assert(BLOCK_N == 64 or BLOCK_N == 128 or BLOCK_N == 256)
    ktiles = (K + 127) // 128
    row0 = gl.program_id(0) * 128
    col0 = gl.program_id(1) * BLOCK_N
    a_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES * 4, 128, 32], CODES)
    b_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES * 4, BLOCK_N, 32], CODES)
    sa_smem = gl.allocate_shared_memory(gl.float32, [STAGES, 4, 128], SCALES)
    sb_smem = gl.allocate_shared_memory(gl.float32, [STAGES, 4, BLOCK_N], SCALES)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both consumers release a slot
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (0, a_smem, b_smem, sa_smem, sb_smem, full, empty, bias_ptr, out_ptr, row0,
                     col0, M, N, stride_o, ktiles, HAS_BIAS, BLOCK_N, STAGES)),
        (_consumer, (1, a_smem, b_smem, sa_smem, sb_smem, full, empty, bias_ptr, out_ptr, row0,
                     col0, M, N, stride_o, ktiles, HAS_BIAS, BLOCK_N, STAGES)),
        (_loader, (a_desc, sa_desc, b_desc, sb_desc, a_smem, b_smem, sa_smem, sb_smem, full,
                   empty, row0, col0, ktiles, BLOCK_N, STAGES)),
    ], [4, 1], [WREGS, LOADER_REGS])


@gluon.jit
def _loader(a_desc, sa_desc, b_desc, sb_desc, a_smem, b_smem, sa_smem, sb_smem, full, empty,
            row0, col0, ktiles, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """One warp: K tile kk into slot kk % STAGES once both consumers released it."""
    NBYTES: gl.constexpr = (128 + BLOCK_N) * 128 + 16 * (128 + BLOCK_N)  # codes, fp32 scales
    for kk in range(ktiles):
        s = kk % STAGES
        mbarrier.wait(empty.index(s), ((kk // STAGES) & 1) ^ 1)
        bar = full.index(s)
        mbarrier.expect(bar, NBYTES)
        for j in gl.static_range(4):
            _tma_load(a_desc, [row0, kk * 128 + j * 32], bar, a_smem.index(s * 4 + j))
            _tma_load(b_desc, [col0, kk * 128 + j * 32], bar, b_smem.index(s * 4 + j))
        _tma_load(sa_desc, [kk * 4, row0], bar, sa_smem.index(s))
        _tma_load(sb_desc, [kk * 4, col0], bar, sb_smem.index(s))


@gluon.jit
def _flat(slot, n: gl.constexpr):
    """A scale slot ([4, rows] fp32, unswizzled: row-major) as its n values in a row."""
    return reinterpret(slot, gl.float32, [n], FLAT)


@gluon.jit
def _consumer(C: gl.constexpr, a_smem, b_smem, sa_smem, sb_smem, full, empty, bias_ptr, out_ptr,
              row0, col0, M, N, stride_o, ktiles, HAS_BIAS: gl.constexpr,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """Consumer C: activation rows row0 + 64 C .. + 64 of every K tile; slice j + 1's wgmma is
    issued before slice j's partial is scaled and added."""
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                  instr_shape=[16, BLOCK_N, 32])
    ROWS: gl.constexpr = gl.SliceLayout(1, MMA)
    COLS: gl.constexpr = gl.SliceLayout(0, MMA)
    acc = gl.zeros([64, BLOCK_N], gl.float32, MMA)
    zero = gl.zeros([64, BLOCK_N], gl.float32, MMA)
    for kk in range(ktiles):
        s = kk % STAGES
        mbarrier.wait(full.index(s), (kk // STAGES) & 1)
        sa_tile = _flat(sa_smem.index(s), 4 * 128)
        sb_tile = _flat(sb_smem.index(s), 4 * BLOCK_N)
        part = warpgroup_mma(a_smem.index(s * 4).slice(64 * C, 64),
                             b_smem.index(s * 4).permute((1, 0)), zero, use_acc=False,
                             is_async=True)
        for j in gl.static_range(4):
            if j < 3:  # the next slice's wgmma in flight while this one's partial is added
                nxt = warpgroup_mma(a_smem.index(s * 4 + j + 1).slice(64 * C, 64),
                                    b_smem.index(s * 4 + j + 1).permute((1, 0)), zero,
                                    use_acc=False, is_async=True)
                part = warpgroup_mma_wait(num_outstanding=1, deps=[part])
            else:
                part = warpgroup_mma_wait(num_outstanding=0, deps=[part])
            # the slice's scales, read straight into the accumulator's row / column layouts
            # (a thread's rows and columns: no layout conversion)
            sa = sa_tile.slice(j * 128 + 64 * C, 64).load(ROWS)
            sb = sb_tile.slice(j * BLOCK_N, BLOCK_N).load(COLS)
            acc = acc + (part * sa[:, None]) * sb[None, :]
            if j < 3:
                part = nxt
        mbarrier.arrive(empty.index(s))  # this consumer's reads of the slot are done
    rows = row0 + 64 * C + gl.arange(0, 64, layout=ROWS)
    cols = col0 + gl.arange(0, BLOCK_N, layout=COLS)
    if HAS_BIAS:
        acc = acc + gl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    gl.store(out_ptr + rows.to(gl.int64)[:, None] * stride_o + cols[None, :],
             acc.to(gl.bfloat16), mask=mask)


__all__ = ["BLOCK_M", "VERIFIED", "k_major_scales", "operands"]
