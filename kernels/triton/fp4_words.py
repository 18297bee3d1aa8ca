"""mxfp4 weights as 32-bit words of 8 codes: the layout (made once at prepare), its decoders
(PTX bf16x2 on a GPU, integer / fp32 Triton in the interpreter — the same values) and the
tile-major arrangement the fast linear kernels read (linear_mma.py, linear_gemv.py).

Why a module of its own: the word layout is a format's fast codec, shared by two kernels, and
sits beside the reference codec it must equal (tests/kernels/triton/test_linear_mma.py checks
every code and scale byte through both decoders).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernels.triton.mx_codec import nan_like, pow2

# Code j of a word's 8 (element 8w + j) sits at nibble WORD_NIBBLE[j]: the decoder makes bf16x2
# pair p from nibbles p and p + 4 (one shift serves both halves), emitting elements 2p, 2p + 1.
WORD_NIBBLE = (0, 4, 1, 5, 2, 6, 3, 7)


def fp4_word_layout(data: Tensor) -> Tensor:
    """Packed mxfp4 codes [N, K/2] uint8 (element 2i in the low nibble) -> int32 words [N, K/8]
    holding elements 8w..8w+7 at nibbles WORD_NIBBLE (K a multiple of 8)."""
    n, half_k = data.shape
    if half_k % 4:
        raise ValueError(f"fp4_word_layout: K={2 * half_k} is not a multiple of 8")
    codes = torch.stack((data & 0xF, data >> 4), dim=-1).reshape(n, half_k // 4, 8).to(torch.int64)
    word = torch.zeros((n, half_k // 4), dtype=torch.int64, device=data.device)
    for j, nib in enumerate(WORD_NIBBLE):
        word |= codes[..., j] << (4 * nib)
    return (word - ((word >> 31) << 32)).to(torch.int32)  # two's complement view of the u32


@triton.jit
def _fp4_word_bf16(words, sword):
    """8 bf16 tensors (elements 8w + j, j = 0..7) of int32 words in `fp4_word_layout`, each times
    its block scale; `sword` holds the scale as bf16x2 2**126 * 2**(E - 127) (0xFF: NaN)."""
    return tl.inline_asm_elementwise(
        """
        {
        .reg .b32 a, b, w;
        shl.b32 a, $8, 6;  shl.b32 b, $8, 12; and.b32 a, a, 0x01C001C0; and.b32 b, b, 0x80008000;
        or.b32 w, a, b; mul.rn.bf16x2 w, w, $9; mov.b32 {$0, $1}, w;
        shl.b32 a, $8, 2;  shl.b32 b, $8, 8;  and.b32 a, a, 0x01C001C0; and.b32 b, b, 0x80008000;
        or.b32 w, a, b; mul.rn.bf16x2 w, w, $9; mov.b32 {$2, $3}, w;
        shr.b32 a, $8, 2;  shl.b32 b, $8, 4;  and.b32 a, a, 0x01C001C0; and.b32 b, b, 0x80008000;
        or.b32 w, a, b; mul.rn.bf16x2 w, w, $9; mov.b32 {$4, $5}, w;
        shr.b32 a, $8, 6;  and.b32 a, a, 0x01C001C0; and.b32 b, $8, 0x80008000;
        or.b32 w, a, b; mul.rn.bf16x2 w, w, $9; mov.b32 {$6, $7}, w;
        }
        """,
        "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [words, sword],
        dtype=(tl.bfloat16,) * 8, is_pure=True, pack=1)


@triton.jit
def _fp4_word_fp32(words, sfac):
    """The values of `_fp4_word_bf16` in fp32 with integer / fp32 Triton ops (the interpreter's
    path; also the oracle of the PTX one): nibble -> fp32 fields (value * 2**-126) -> * sfac."""
    out0 = (((words << 28) >> 6) & -2118123520).to(tl.float32, bitcast=True) * sfac
    out1 = (((words << 12) >> 6) & -2118123520).to(tl.float32, bitcast=True) * sfac
    out2 = (((words << 24) >> 6) & -2118123520).to(tl.float32, bitcast=True) * sfac
    out3 = (((words << 8) >> 6) & -2118123520).to(tl.float32, bitcast=True) * sfac
    out4 = (((words << 20) >> 6) & -2118123520).to(tl.float32, bitcast=True) * sfac
    out5 = (((words << 4) >> 6) & -2118123520).to(tl.float32, bitcast=True) * sfac
    out6 = (((words << 16) >> 6) & -2118123520).to(tl.float32, bitcast=True) * sfac
    out7 = ((words >> 6) & -2118123520).to(tl.float32, bitcast=True) * sfac
    return out0, out1, out2, out3, out4, out5, out6, out7


@triton.jit
def _join8(o0, o1, o2, o3, o4, o5, o6, o7, R: tl.constexpr, W: tl.constexpr):
    """Eight [R, W] tensors -> [R, 8W], element 8w + j from o_j[:, w]."""
    evens = tl.join(tl.join(o0, o4), tl.join(o2, o6))  # [R, W, 2, 2]: o0 o2 o4 o6
    odds = tl.join(tl.join(o1, o5), tl.join(o3, o7))
    return tl.reshape(tl.join(evens, odds), [R, 8 * W])


@triton.jit
def fp4_word_tile(words_ptr, scale_ptr, stride_d, stride_s, N, K, pid_n, kk, ASM: tl.constexpr,
                   TILED: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """An mxfp4 weight tile [BLOCK_N, BLOCK_K] from `fp4_word_layout` words: bf16 (ASM) or fp32,
    exact; every block scale byte <= 128 or 0xFF (the host checks); K % BLOCK_K == 0.
    TILED: words and scale bytes stored tile by tile (`tile_major`), each tile one contiguous
    run of memory."""
    NW: tl.constexpr = BLOCK_K // 8
    NB: tl.constexpr = BLOCK_K // 32
    if TILED:
        tile = (pid_n * (K // BLOCK_K) + kk).to(tl.int64)
        r = tl.arange(0, BLOCK_N)
        words = tl.load(words_ptr + tile * (BLOCK_N * NW) + r[:, None] * NW
                        + tl.arange(0, NW)[None, :])
        sbyte = tl.load(scale_ptr + tile * (BLOCK_N * NB) + r[:, None] * NB
                        + tl.arange(0, NB)[None, :]).to(tl.int32)
    else:
        rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rows_c = tl.minimum(rows, N - 1).to(tl.int64)  # clamped: in bounds, masked at the store
        words = tl.load(words_ptr + rows_c[:, None] * stride_d + kk * NW
                        + tl.arange(0, NW)[None, :])
        sbyte = tl.load(scale_ptr + rows_c[:, None] * stride_s + kk * NB
                        + tl.arange(0, NB)[None, :]).to(tl.int32)
    if ASM:
        half = tl.where(sbyte == 255, 0x7FC0, (sbyte + 126) << 7)  # bf16 2**(E - 1); NaN
        sword = tl.reshape(tl.broadcast_to((half | (half << 16))[:, :, None], [BLOCK_N, NB, 4]),
                           [BLOCK_N, NW])
        o0, o1, o2, o3, o4, o5, o6, o7 = _fp4_word_bf16(words, sword)
    else:
        fac = tl.where(sbyte == 255, nan_like(sbyte), pow2(tl.minimum(sbyte, 128) - 1))
        sfac = tl.reshape(tl.broadcast_to(fac[:, :, None], [BLOCK_N, NB, 4]), [BLOCK_N, NW])
        o0, o1, o2, o3, o4, o5, o6, o7 = _fp4_word_fp32(words, sfac)
    return _join8(o0, o1, o2, o3, o4, o5, o6, o7, BLOCK_N, NW)



def fp4_words(cached: dict, consts: dict, k: int, block_k: int) -> Tensor | None:
    """The weight as `fp4_word_layout` words when the short decode applies (packed mxfp4, K a
    multiple of the K tile, no saturation, every scale byte <= 128 or 0xFF), else None. Made once
    per weight (the scale check is a device sync: at the first call, never again)."""
    if consts["W_PACK"] != 1 or consts["W_BITS"] != 4 or consts["W_SAT"] or k % block_k:
        return None
    words = cached.get("mma_fp4_words", False)
    if words is False:
        from kernels.triton.linear_decode import fp4_scale_fits

        words = cached.setdefault("mma_fp4_words", fp4_word_layout(cached["data"])
                                  if fp4_scale_fits(cached) else None)
    return words


def tiled_fp4(cached: dict, words: Tensor, block_n: int, block_k: int) -> tuple[Tensor, Tensor]:
    """The words and scale bytes of a prepared weight tile-major for [block_n, block_k] tiles,
    made once per tile shape and kept in `cached` (the mma and gemv kernels share them)."""
    key = ("fp4_tiled", block_n, block_k)
    if key not in cached:
        cached[key] = (tile_major(words, block_n, block_k // 8),
                       tile_major(cached["scales"], block_n, block_k // 32))
    return cached[key]


def tile_major(t: Tensor, rows: int, cols: int) -> Tensor:
    """[R, C] -> the same values tile by tile: tile (i, j) = t[i*rows:(i+1)*rows, j*cols:...]
    as one contiguous [rows, cols] run, tiles in (i, j) order; R is padded with zero rows up to
    a multiple of `rows` (C must be a multiple of `cols`)."""
    r, c = t.shape
    if c % cols:
        raise ValueError(f"tile_major: {c} columns are not a multiple of the tile's {cols}")
    pad = -r % rows
    if pad:
        t = torch.cat((t, t.new_zeros((pad, c))))
    return t.reshape(-1, rows, c // cols, cols).permute(0, 2, 1, 3).contiguous().reshape(-1, cols)


# --- the wgmma layout (kernels/triton/linear_wgmma.py): the decoded tile IS wgmma's A operand ---
# A [16 * W, BLOCK_K] tile (W warps) of the weight is wgmma's register operand A: thread (warp w,
# lane 4g + t) holds rows 16w + g and 16w + 8 + g (h = 0, 1) at columns 16c + 2t + e and
# 16c + 8 + 2t + e (q = 0, 1; e = 0, 1). One 32-bit word holds the 8 codes of one thread, one
# row h and one 32-column block b (columns 32b + 16 c0 + 8q + 2t + e, element j = 4 c0 + 2q + e),
# so each word has one scale byte. Its bits are placed so the decoder needs ~15 instructions a
# word: element j's code bits (m, e0, e1, sign) sit at WGMMA_BITS[j]; pair (2p, 2p + 1) is
# rotated (pairs 0, 1: one rotation) so the bits land where a bf16x2 wants them (m, e0, e1 at
# bits 6..8 / 22..24, signs at 15 / 31: value * 2**-126); one bf16x2 multiply by the scale word
# fixes the bias and applies the block scale. Words of a tile are stored [w][h][b // 4][g][t]
# [b % 4]: each thread reads 16-byte vectors, a warp 512 contiguous bytes.
WGMMA_BITS = ((6, 7, 8, 15), (22, 23, 24, 31), (9, 10, 11, 18), (25, 26, 27, 2),
              (12, 13, 14, 16), (28, 29, 30, 0), (19, 20, 21, 17), (3, 4, 5, 1))
WGMMA_WARPS = 4  # one warpgroup: BLOCK_N = 64 weight rows a program
# The one layout every wgmma config reads (wgmma_config.one_layout; its tiles of 64 rows x 128
# codes, "chunks"): a program's K tile of 128, 256 or 512 codes is that many consecutive chunks
# of a 64-row block, and a 128-row program two blocks, so one copy of the weight serves every
# (block_k, groups) the table holds. K is padded to whole ALIGN[1] (the widest K tile) and N
# to whole ALIGN[0] rows (the tallest program), with code 0 / scale byte 0 (value +0).
ALIGN = (128, 512)
CHUNK_K = 128  # codes a chunk along K


def wgmma_layout(data: Tensor, scales: Tensor, block_k: int, warps: int = WGMMA_WARPS,
                 align: tuple[int, int] = (1, 1)) -> tuple[Tensor, Tensor]:
    """Packed mxfp4 codes [N, K/2] + E8M0 bytes [N, K/32] -> (int32 words, uint8 scale bytes),
    tile by tile ([16 * warps, block_k] tiles; N padded with zero rows, K with zero columns to
    whole tiles: code 0, scale byte 0, value +0, and the kernel zero-fills x past K). Scale byte
    E becomes E + 126 (the bf16 exponent of 2**(E - 1)); a NaN block (0xFF) keeps 0xFF and its
    codes become 0, so every element decodes to 0 * inf = NaN. Needs K % 32 == 0,
    block_k % 128 == 0 and every finite scale byte <= 128 (`linear_decode.fast_fp4_scale`).
    `align`: pad N and K to whole multiples of these too (ALIGN: the one layout's)."""
    n, half_k = data.shape
    k = 2 * half_k
    if block_k % 128 or k % 32:
        raise ValueError(f"wgmma_layout: K={k} must hold whole 32-element blocks and the K tile "
                         f"{block_k} be a multiple of 128")
    nan = scales == 255
    codes = torch.stack((data & 0xF, data >> 4), dim=-1).reshape(n, k)
    codes = codes.masked_fill(nan.repeat_interleave(32, dim=1), 0)
    sbytes = torch.where(nan, scales, scales + 126)
    codes, sbytes = wgmma_pad(codes, sbytes, block_k, warps, align)
    return wgmma_words(codes, block_k, warps), wgmma_scales(sbytes, block_k, warps)


def wgmma_pad(codes: Tensor, sbytes: Tensor, block_k: int, warps: int,
              align: tuple[int, int] = (1, 1)) -> tuple[Tensor, Tensor]:
    """Codes [N, K] and prepared scale bytes [N, K/32] padded to whole [16 * warps, block_k]
    tiles, and to whole multiples of `align` (rows, codes; powers of two), with code 0 and
    byte 0 (value +0)."""
    n, k = codes.shape
    rows, block_k = max(16 * warps, align[0]), max(block_k, align[1])
    return (torch.nn.functional.pad(codes, (0, -k % block_k, 0, -n % rows)),
            torch.nn.functional.pad(sbytes, (0, -k % block_k // 32, 0, -n % rows)))


def wgmma_order(codes: Tensor, block_k: int, warps: int) -> Tensor:
    """Padded codes [N, K] in the kernel's order, one row of 8 per thread, row and block:
    (nt, w, h, g, kt, b_hi, b_lo, c0, q, t, e) -> (nt, kt, w, h, b_hi, g, t, b_lo | c0, q, e)."""
    n, k = codes.shape
    nt, kt, nb = n // (16 * warps), k // block_k, block_k // 32
    c = codes.reshape(nt, warps, 2, 8, kt, nb // 4, 4, 2, 2, 4, 2).to(torch.int64)
    return c.permute(0, 4, 1, 2, 5, 3, 9, 6, 7, 8, 10).reshape(-1, 8)


def to_int32(word: Tensor) -> Tensor:
    """Unsigned 32-bit values held in int64 -> int32 bit patterns."""
    return (word - ((word >> 31) << 32)).to(torch.int32)


def wgmma_words(codes: Tensor, block_k: int, warps: int,
                bit_places: tuple = WGMMA_BITS) -> Tensor:
    """Padded 4-bit codes [N, K] -> the int32 words (8 codes each, code j's bits at
    bit_places[j], mxfp4's WGMMA_BITS by default)."""
    return place_bits(wgmma_order(codes, block_k, warps), bit_places)


def place_bits(codes: Tensor, bit_places: tuple) -> Tensor:
    """Codes [W, j] (int64, one word's codes a row) -> int32 words: bit i of code j at
    bit_places[j][i] (the placements of fp4_words, fp6_words and fp8_words)."""
    word = torch.zeros(codes.shape[0], dtype=torch.int64, device=codes.device)
    for j, bits in enumerate(bit_places):
        for i, pos in enumerate(bits):
            word |= ((codes[:, j] >> i) & 1) << pos
    return to_int32(word)


def wgmma_scales(sbytes: Tensor, block_k: int, warps: int) -> Tensor:
    """Padded scale bytes [N, K/32] -> the kernel's order (nt, kt, w, g, h, b), flat."""
    n, nbk = sbytes.shape
    nt, nb = n // (16 * warps), block_k // 32
    s = sbytes.reshape(nt, warps, 2, 8, nbk // nb, nb).permute(0, 4, 1, 3, 2, 5).contiguous()
    return s.reshape(-1)


def _rotr(v: Tensor, r: int) -> Tensor:
    return ((v >> r) | (v << (32 - r))) & 0xFFFFFFFF


def wgmma_pairs(words: Tensor) -> tuple[Tensor, ...]:
    """The four bf16x2 bit patterns (uint32 in int64) the PTX makes from words, before its
    multiply: codes 2p / 2p + 1 at bits {15, 8..6} / {31, 24..22} of pair p."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    full, eem, sign = 0x81C081C0, 0x01C001C0, 0x80008000
    return (w & full, _rotr(w, 3) & full, ((w >> 6) & eem) | (_rotr(w, 1) & sign),
            (_rotr(w, 13) & eem) | (_rotr(w, 2) & sign))


def wgmma_scaled(pairs: tuple[Tensor, ...], sbytes: Tensor, n: int, k: int, block_k: int,
                 warps: int) -> Tensor:
    """bf16x2 patterns of every word (pairs) times their scale word (bf16 2**(E' - 127); E'
    = 255: inf) -> fp32 [n, K padded] in the weight's order: the PTX's multiply, exact."""
    rows, nb = 16 * warps, block_k // 32
    k += -k % block_k
    halves = []
    for p in pairs:
        for shift in (0, 16):  # bf16 bits -> fp32 (exact)
            halves.append(to_int32(((p >> shift) & 0xFFFF) << 16).view(torch.float32))
    vals = torch.stack(halves, dim=-1)  # (word, j)
    sb = sbytes.to(torch.int64)
    nt, kt = -(-n // rows), k // block_k
    sb = sb.reshape(nt, kt, warps, 8, 2, nb).permute(0, 1, 2, 4, 5, 3)  # (.., w, h, b, g)
    fac = to_int32(sb << 23).view(torch.float32)
    vals = vals.reshape(nt, kt, warps, 2, nb // 4, 8, 4, 4, 8)  # (.., w, h, b_hi, g, t, b_lo, j)
    fac = fac.reshape(nt, kt, warps, 2, nb // 4, 4, 8).permute(0, 1, 2, 3, 4, 6, 5)
    vals = vals * fac[:, :, :, :, :, :, None, :, None]
    # (nt, kt, w, h, b_hi, g, t, b_lo, c0, q, e) -> (nt, w, h, g, kt, b_hi, b_lo, c0, q, t, e)
    vals = vals.reshape(nt, kt, warps, 2, nb // 4, 8, 4, 4, 2, 2, 2)
    vals = vals.permute(0, 2, 3, 5, 1, 4, 7, 8, 9, 6, 10).reshape(nt * rows, k)
    return vals[:n]


def wgmma_decode(words: Tensor, sbytes: Tensor, n: int, k: int, block_k: int,
                 warps: int = WGMMA_WARPS) -> Tensor:
    """fp32 [n, K padded to block_k] values of `wgmma_layout` words by the kernel's own bit
    operations (the PTX of linear_wgmma, step for step, in integer torch): the CPU check of
    the GPU decoder."""
    return wgmma_scaled(wgmma_pairs(words), sbytes, n, k, block_k, warps)


__all__ = ["WGMMA_BITS", "WGMMA_WARPS", "WORD_NIBBLE", "fp4_word_layout", "fp4_word_tile",
           "fp4_words", "place_bits", "tile_major", "tiled_fp4", "to_int32", "wgmma_decode", "wgmma_layout",
           "wgmma_order", "wgmma_pad", "wgmma_pairs", "wgmma_scaled", "wgmma_scales",
           "wgmma_words"]
