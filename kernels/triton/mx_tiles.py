"""The device tiles the emulation linear and MoE kernels read (linear_emulation, linear_decode,
linear_gemv, linear_mma, moe_grouped): `act_tile`, the activation tile after the contract's QDQ,
and `weight_tile`, the dequantized weight tile (and `fp8_static_qdq_kernel`, the static fp8 QDQ
alone, by `act_tile`'s steps). Built from mx_codec's helpers, so they round
exactly as the quantize / dequantize / QDQ kernels do; the host side of these tiles is
linear_tiles.py.
"""
from __future__ import annotations

import triton
import triton.language as tl

from kernels.triton.mx_codec import (
    decode, e8m0_value, fp32_to_bf16_bits, load_codes, load_fp32, qdq_blocks, round_value,
    saturate, scaled_saturated, store_fp32, tile_blocks,
)


@triton.jit
def act_tile(x_ptr, stride_x, s_ptr, M, K, pid_m, kk, IN_KIND: tl.constexpr,
             ACT_MODE: tl.constexpr, A_MBITS: tl.constexpr, A_BIAS: tl.constexpr,
             A_EMAX: tl.constexpr, A_MAX_NORMAL: tl.constexpr, A_MAXN_MANT: tl.constexpr,
             A_MAXN_SUB: tl.constexpr, A_IS_INT: tl.constexpr, A_ROUNDING: tl.constexpr,
             HW_CAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """The activation tile [BLOCK_M, BLOCK_K] after the contract's QDQ, as fp32 values that
    x's dtype holds exactly (the dispatcher's output, bit for bit). Masked-off entries are 0."""
    if ACT_MODE == 1:  # dynamic MX: the same steps as mx_quant's fused QDQ kernel
        x, rows = tile_blocks(x_ptr, stride_x, M, K, pid_m, kk, BLOCK_M, BLOCK_K, IN_KIND)
        x = tl.reshape(qdq_blocks(x, IN_KIND, A_MBITS, A_BIAS, A_EMAX, A_MAX_NORMAL,
                                  A_MAXN_MANT, A_MAXN_SUB, A_IS_INT, A_ROUNDING),
                       [BLOCK_M, BLOCK_K])
    else:
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = kk * BLOCK_K + tl.arange(0, BLOCK_K)
        mask = (rows < M)[:, None] & (cols < K)[None, :]
        x = load_fp32(x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :], mask,
                      IN_KIND)
        if ACT_MODE == 2:  # static fp8 E4M3: clamp(x / s, +-448) -> RNE -> * s
            s = tl.load(s_ptr)
            y = tl.div_rn(x, s)  # a true (IEEE) division, as torch's x.float() / scale
            # round_value saturates at +-448 (Inf too) and rounds to the E4M3 grid; a NaN
            # must stay NaN (the min inside it would drop it on a GPU).
            q = round_value(y, A_MBITS, A_BIAS, A_MAX_NORMAL, A_IS_INT)
            # saturated to x's dtype as the dispatcher does: a finite input never becomes Inf
            x = saturate(tl.where(x != x, x, q * s), IN_KIND)
    if ACT_MODE != 0:  # the QDQ result (saturated) cast to x's dtype (RNE)
        if IN_KIND == 1:  # HW_CAST: the GPU's RNE convert; the interpreter's cast truncates
            if HW_CAST:
                x = x.to(tl.bfloat16).to(tl.float32)
            else:
                x = (fp32_to_bf16_bits(x).to(tl.int32) << 16).to(tl.float32, bitcast=True)
        elif IN_KIND == 2:
            x = x.to(tl.float16).to(tl.float32)
    return x


@triton.jit
def weight_tile(data_ptr, scale_ptr, stride_d, stride_s, N, K, pid_n, kk,
                W_MBITS: tl.constexpr, W_BIAS: tl.constexpr, W_BITS: tl.constexpr,
                W_IS_INT: tl.constexpr, W_SPECIALS: tl.constexpr, W_PACK: tl.constexpr,
                W_SAT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The dequantized weight tile [BLOCK_N, BLOCK_K] in fp32: code value * 2**E (exact);
    a scale byte 0xFF makes its block NaN. Masked-off entries are 0. W_SAT (a weight whose
    largest block can pass fp32's max, `weight_may_overflow`): saturated to +-fp32 max like
    mx_dequantize's reference (an E5M2 Inf code stays Inf)."""
    NB: tl.constexpr = BLOCK_K // 32
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    codes = load_codes(data_ptr, stride_d, rows, kk, N, K, W_BITS, W_PACK, BLOCK_N, BLOCK_K)
    blk = kk * NB + tl.arange(0, NB)
    sbyte = tl.load(scale_ptr + rows.to(tl.int64)[:, None] * stride_s + blk[None, :],
                    mask=(rows < N)[:, None] & (blk < K // 32)[None, :], other=0).to(tl.int32)
    val = decode(tl.reshape(codes, [BLOCK_N, NB, 32]), W_MBITS, W_BIAS, W_BITS, W_IS_INT,
                 W_SPECIALS)
    if W_SAT:
        val = scaled_saturated(val, e8m0_value(sbyte)[:, :, None], 0, W_SPECIALS)
    else:
        val = val * e8m0_value(sbyte)[:, :, None]  # a NaN scale (0xFF): the whole block NaN
    return tl.reshape(val, [BLOCK_N, BLOCK_K])


@triton.jit
def fp8_static_qdq_kernel(x_ptr, out_ptr, R, K, stride_x, stride_o, s_ptr,
                          IN_KIND: tl.constexpr, A_MBITS: tl.constexpr, A_BIAS: tl.constexpr,
                          A_MAX_NORMAL: tl.constexpr, A_IS_INT: tl.constexpr,
                          HW_CAST: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """The static per-tensor fp8 activation QDQ of x [R, K] into out (x's dtype) with the scale
    read on the device (s_ptr: fp32 [1]), by `act_tile`'s own steps: for kernels that take x
    QDQ'd first (wgmma, dequant-gemm), one pass and no host copy of the scale (CUDA graphs
    capture it). Arguments as mx_quant's _qdq_kernel's up to stride_o (qdq_plan launches both)."""
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    x = act_tile(x_ptr, stride_x, s_ptr, R, K, pid_r, pid_k, IN_KIND, 2, A_MBITS, A_BIAS, 0,
                 A_MAX_NORMAL, 0, 0, A_IS_INT, 0, HW_CAST, BLOCK_R, BLOCK_K)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    store_fp32(out_ptr + rows.to(tl.int64)[:, None] * stride_o + cols[None, :], x,
               (rows < R)[:, None] & (cols < K)[None, :], OUT_KIND=IN_KIND, HW_CAST=HW_CAST)
