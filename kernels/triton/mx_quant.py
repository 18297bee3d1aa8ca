"""Triton MX quantize / dequantize / fused QDQ for every element format, bit-exact with
kernels.reference.mx (docs/numerics.md).

Each program owns a [BLOCK_R, BLOCK_K] tile of a row-major [R, K] tensor: one coalesced load,
the 32-element block max from the fp32 bits (a NaN / Inf anywhere makes the block's scale byte
0xFF and its codes 0), integer shared exponent, element rounding by exact fp32 "magic number"
adds (codec helpers in mx_codec.py), then (quantize) packing per kernels.spec.formats' layouts:
  PACK 0: one code a byte; PACK 1: mxfp4 two codes a byte, element 2i in the low nibble;
  PACK 2: mxfp6 four codes in three bytes, written as little-endian int32 words: 12 a 64-code
  chunk, one contiguous store per tile (packed_codes.py: 16-byte vector stores).
GPU tiles, as measured: quant_tiles.gpu_tile; under TRITON_INTERPRET=1 one small fixed tile
keeps the CPU tests fast.
The host-side `bits_view` and `pack_code` are public here; the activation QDQ's launch side
(plans, the stream's scratch rows) is qdq_plan.py.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.spec.formats import BLOCK, ElemFormat, bytes_per_row, check_rounding, get_format
from kernels.spec.formats import resolve_layout
from kernels.spec.platform import device_platform
from kernels.triton import fp4_lanes, hw_cvt, launcher, quant_tiles
from kernels.triton.fp4_lanes import lane_bytes, word_tile
from kernels.triton.grid_dependency import release_dependents
from kernels.triton.mx_codec import (
    KIND_OF_DTYPE, ROUNDING_CODE, block_exponents, blocks_scaled, decode, e8m0_value, encode,
    format_constexprs, load_codes, qdq_blocks, scaled_saturated, store_fp32, tile_bits,
    tile_blocks,
)
from kernels.triton.packed_codes import byte_cols, load_fp6_halves, store_codes, word_io_here
from kernels.triton.hw_cvt import cvt_codes, cvt_values, satfinite_cast

_WHERE = "kernels.triton.mx_quant"


@triton.jit
def _quantize_kernel(x_ptr, data_ptr, scale_ptr, R, K, stride_x, stride_d, stride_s,
                     IN_KIND: tl.constexpr, MBITS: tl.constexpr, BIAS: tl.constexpr,
                     EMAX: tl.constexpr, MAX_NORMAL: tl.constexpr, MAXN_MANT: tl.constexpr,
                     MAXN_SUB: tl.constexpr, BITS: tl.constexpr, IS_INT: tl.constexpr,
                     SPECIALS: tl.constexpr, ROUNDING: tl.constexpr, PACK: tl.constexpr,
                     ROW16B: tl.constexpr, CVT: tl.constexpr, CVT_SHIFT: tl.constexpr,
                     CVT_CLAMP: tl.constexpr, CVT_ASM: tl.constexpr, LANES: tl.constexpr,
                     LANES_ASM: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
                     WORD_IO: tl.constexpr = False, LANE_WORDS: tl.constexpr = False):
    """ROW16B: stride_d is a multiple of 4 (PACK 2 words: rows 16-byte aligned, K % 64 == 0),
    which Triton's own specialization (multiples of 16) misses when K % 256 != 0.
    CVT != 0: the elements round through an fp8 conversion (hw_cvt.cvt_codes; PTX where
    CVT_ASM). LANES: mxfp4 of bf16 input on bf16x2 lanes (fp4_lanes; PTX where LANES_ASM; on
    whole int32 words where LANE_WORDS).
    WORD_IO: a thread's codes are the 8 elements of its 16-byte bf16 vector
    (packed_codes.word_io_here: PACK 1 4-byte stores, PACK 2 half groups)."""
    tl.static_assert(BLOCK_K % 32 == 0, "BLOCK_K must hold whole 32-element MX blocks")
    tl.static_assert((BLOCK_R & (BLOCK_R - 1)) == 0, "BLOCK_R must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_K & (BLOCK_K - 1)) == 0, "BLOCK_K must be a power of two (tl.arange)")
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    NB: tl.constexpr = BLOCK_K // 32
    if LANES and LANE_WORDS:  # the bf16 bits as words of two: the rounding in lanes
        h, amax, rows = word_tile(x_ptr, stride_x, R, K, pid_r, pid_k, BLOCK_R, BLOCK_K)
        e, bad = block_exponents(amax, MBITS, EMAX, MAXN_MANT, MAXN_SUB, ROUNDING)
    elif LANES:  # the bf16 bits themselves: the block max on 16 bits, the rounding in lanes
        h, rows = tile_bits(x_ptr, stride_x, R, K, pid_r, pid_k, BLOCK_R, BLOCK_K)
        amax16 = tl.max(h & 0x7FFF, axis=2)  # |x|'s bits (NaN's above Inf's), as int16
        e, bad = block_exponents(amax16.to(tl.int32) << 16, MBITS, EMAX, MAXN_MANT, MAXN_SUB,
                                 ROUNDING)
    else:
        x, rows = tile_blocks(x_ptr, stride_x, R, K, pid_r, pid_k, BLOCK_R, BLOCK_K, IN_KIND)
        v, e, bad = blocks_scaled(x, MBITS, EMAX, MAXN_MANT, MAXN_SUB, ROUNDING)
        if CVT == 0:  # `encode`, in the order the gated paths found it (the same SASS)
            codes = encode(v, MBITS, BIAS, MAX_NORMAL, BITS, IS_INT, SATURATE=ROUNDING != 2)
            codes = tl.reshape(tl.where(bad[:, :, None], 0, codes), [BLOCK_R, BLOCK_K])
    row_ok = (rows < R)[:, None]
    d_off = rows.to(tl.int64) * stride_d
    if ROW16B:
        d_off = tl.multiple_of(d_off, 4)  # lets whole fp6 tiles use 16-byte vector stores
    d_row = data_ptr + d_off[:, None]
    if LANES and PACK == 1:
        byte = lane_bytes(h, e, bad, ROUNDING == 0, True, LANES_ASM, LANE_WORDS, BLOCK_R,
                          BLOCK_K)
        cols = byte_cols(pid_k, BLOCK_K, WORD_IO)
        tl.store(d_row + cols[None, :], byte, mask=row_ok & (cols < K // 2)[None, :])
    else:
        if LANES:  # one code a byte (uint8)
            codes = lane_bytes(h, e, bad, ROUNDING == 0, False, LANES_ASM, False, BLOCK_R,
                               BLOCK_K)
        elif CVT != 0:  # uint8 codes, or (PACK 2) int32 parts whose pack4 is the group
            codes = tl.reshape(cvt_codes(x, e, bad, CVT, CVT_SHIFT, CVT_CLAMP, CVT_ASM,
                                         PACK == 2), [BLOCK_R, BLOCK_K])
        store_codes(codes, d_row, row_ok, pid_k, K, PACK, BLOCK_R, BLOCK_K, WORD_IO)
    blk = pid_k * NB + tl.arange(0, NB)
    sbyte = tl.where(bad, 255, e + 127).to(tl.uint8)
    tl.store(scale_ptr + rows.to(tl.int64)[:, None] * stride_s + blk[None, :], sbyte,
             mask=row_ok & (blk < K // 32)[None, :])


@triton.jit
def _dequantize_kernel(data_ptr, scale_ptr, out_ptr, R, K, stride_d, stride_s,
                       stride_o, OUT_KIND: tl.constexpr, MBITS: tl.constexpr,
                       BIAS: tl.constexpr, BITS: tl.constexpr, IS_INT: tl.constexpr,
                       SPECIALS: tl.constexpr, PACK: tl.constexpr, HW_CAST: tl.constexpr,
                       CVT: tl.constexpr, CVT_SHIFT: tl.constexpr, CVT_ASM: tl.constexpr,
                       SAT_CAST: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
                       WORD_IO: tl.constexpr = False):
    """CVT != 0: the codes decode through the fp8 -> f16 conversion (hw_cvt.cvt_values);
    SAT_CAST: the output is saturated and rounded by one conversion (hw_cvt.satfinite_cast);
    WORD_IO: a thread's codes are the 8 elements of its 16-byte vector (packed_codes)."""
    tl.static_assert(BLOCK_K % 32 == 0, "BLOCK_K must hold whole 32-element MX blocks")
    tl.static_assert((BLOCK_R & (BLOCK_R - 1)) == 0, "BLOCK_R must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_K & (BLOCK_K - 1)) == 0, "BLOCK_K must be a power of two (tl.arange)")
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    NB: tl.constexpr = BLOCK_K // 32
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = (rows < R)[:, None]
    if CVT != 0 and PACK == 0:
        # 8 codes a thread, as the output's 16-byte stores hold: the asm below keeps Triton
        # from moving the layout conversion to the bytes (measured by sass_quant: 3 barriers
        # for 5)
        cols = tl.max_contiguous(pid_k * BLOCK_K + tl.arange(0, BLOCK_K), 8)
        d_row = data_ptr + rows.to(tl.int64)[:, None] * stride_d
        codes = tl.load(d_row + cols[None, :], mask=row_ok & (cols < K)[None, :], other=0)
    elif PACK == 2 and WORD_IO:
        codes = load_fp6_halves(data_ptr + rows.to(tl.int64)[:, None] * stride_d, row_ok,
                                pid_k, K, BLOCK_R, BLOCK_K)
    else:
        codes = load_codes(data_ptr, stride_d, rows, pid_k, R, K, BITS, PACK, BLOCK_R, BLOCK_K,
                           WORD_IO)
    blk = pid_k * NB + tl.arange(0, NB)
    sbyte = tl.load(scale_ptr + rows.to(tl.int64)[:, None] * stride_s + blk[None, :],
                    mask=row_ok & (blk < K // 32)[None, :], other=0).to(tl.int32)
    codes = tl.reshape(codes, [BLOCK_R, NB, 32])
    if CVT != 0:
        elem = cvt_values(codes.to(tl.uint8), CVT, CVT_SHIFT, CVT_ASM)
    else:
        elem = decode(codes, MBITS, BIAS, BITS, IS_INT, SPECIALS)
    # a NaN scale (0xFF): the whole block NaN; beyond the dtype's max: +-max (Inf codes stay;
    # SAT_CAST, no Inf codes: saturated in the store's conversion)
    if SAT_CAST:
        val = elem * e8m0_value(sbyte)[:, :, None]
    else:
        val = scaled_saturated(elem, e8m0_value(sbyte)[:, :, None], OUT_KIND, SPECIALS)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    ptrs = out_ptr + rows.to(tl.int64)[:, None] * stride_o + cols[None, :]
    val = tl.reshape(val, [BLOCK_R, BLOCK_K])
    if SAT_CAST:
        tl.store(ptrs, satfinite_cast(val, OUT_KIND), mask=row_ok & (cols < K)[None, :])
    else:
        store_fp32(ptrs, val, row_ok & (cols < K)[None, :], OUT_KIND, HW_CAST)


@triton.jit
def _qdq_kernel(x_ptr, out_ptr, R, K, stride_x, stride_o, IN_KIND: tl.constexpr,
                MBITS: tl.constexpr, BIAS: tl.constexpr, EMAX: tl.constexpr,
                MAX_NORMAL: tl.constexpr, MAXN_MANT: tl.constexpr, MAXN_SUB: tl.constexpr,
                BITS: tl.constexpr, IS_INT: tl.constexpr, SPECIALS: tl.constexpr,
                ROUNDING: tl.constexpr, HW_CAST: tl.constexpr, BLOCK_R: tl.constexpr,
                BLOCK_K: tl.constexpr, TRIGGER: tl.constexpr = False):
    """TRIGGER: let a GEMM launched programmatically after it start now (grid_dependency)."""
    tl.static_assert(BLOCK_K % 32 == 0, "BLOCK_K must hold whole 32-element MX blocks")
    tl.static_assert((BLOCK_R & (BLOCK_R - 1)) == 0, "BLOCK_R must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_K & (BLOCK_K - 1)) == 0, "BLOCK_K must be a power of two (tl.arange)")
    if TRIGGER:
        release_dependents()
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    x, rows = tile_blocks(x_ptr, stride_x, R, K, pid_r, pid_k, BLOCK_R, BLOCK_K, IN_KIND)
    val = qdq_blocks(x, IN_KIND, MBITS, BIAS, EMAX, MAX_NORMAL, MAXN_MANT, MAXN_SUB, IS_INT,
                     ROUNDING)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    store_fp32(out_ptr + rows.to(tl.int64)[:, None] * stride_o + cols[None, :],
               tl.reshape(val, [BLOCK_R, BLOCK_K]), (rows < R)[:, None] & (cols < K)[None, :],
               OUT_KIND=IN_KIND, HW_CAST=HW_CAST)


# ----------------------------------------------------------------------------- launch set-up
_INTERPRETED = type(_quantize_kernel).__name__ == "InterpretedFunction"
def _tile(kernel: str, pack: int) -> dict[str, int]:
    """The tile a launch of `kernel` takes here: the interpreter's, or the GPU's."""
    return quant_tiles.INTERPRETER_TILE if _INTERPRETED else quant_tiles.gpu_tile(kernel, pack)


_KERNELS = {_quantize_kernel: "quantize", _dequantize_kernel: "dequantize"}  # (else qdq)


def _launch(kernel, ptrs: tuple, r: int, k: int, strides: tuple, consts: dict) -> None:
    """Run `kernel` over an [r, k] grid of tiles."""
    which, pack = _KERNELS.get(kernel, "qdq"), consts.get("PACK", 0)
    tile = _tile(which, pack)
    grid = (launcher.cdiv(r, tile["BLOCK_R"]), launcher.cdiv(k, tile["BLOCK_K"]))
    named = dict(consts, **tile)
    head = (*ptrs, r, k, *strides)
    args = head + tuple(named[name] for name in kernel.arg_names[len(head):])
    launcher.launch_auto(kernel, grid, args, num_warps=quant_tiles.GPU_WARPS if _INTERPRETED
                         else quant_tiles.gpu_warps(which, pack))


# ----------------------------------------------------------------------------- public API
def _format(fmt: ElemFormat | str) -> ElemFormat:
    if isinstance(fmt, str):
        return get_format(fmt)
    if not isinstance(fmt, ElemFormat):
        raise TypeError(f"{_WHERE}: fmt must be a kernels.spec.formats.ElemFormat or a format "
                        f"name, got {type(fmt).__name__}")
    return fmt


def _check_tensor(t: object, name: str, fn: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{_WHERE}.{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{_WHERE}.{fn}: {name} must be 2-D [R, K], got shape {tuple(t.shape)}; "
                         "reshape it to (-1, K) first")
    if t.shape[1] > 1 and t.stride(1) != 1:
        raise ValueError(f"{_WHERE}.{fn}: {name} must have unit stride along its last axis, got "
                         f"strides {t.stride()}; pass {name}.contiguous()")
    if t.device.type not in ("cpu", "cuda"):  # meta has no values; others: not Triton's
        raise ValueError(f"{_WHERE}.{fn}: {name} is on {t.device}; the Triton kernels need a CUDA "
                         "tensor (or a CPU one under TRITON_INTERPRET=1)")
    if not _INTERPRETED and not t.is_cuda:
        raise ValueError(f"{_WHERE}.{fn}: {name} is on {t.device}; the Triton kernels need a CUDA "
                         "tensor (or TRITON_INTERPRET=1 set before importing kernels.triton)")
    return t


def _check_input(x2d: object, fn: str) -> torch.Tensor:
    x = _check_tensor(x2d, "x2d", fn)
    if x.dtype not in KIND_OF_DTYPE:
        raise ValueError(f"{_WHERE}.{fn}: x2d has dtype {x.dtype}; expected float32, bfloat16 or "
                         "float16 (cast it first)")
    if x.shape[1] % BLOCK:
        raise ValueError(f"{_WHERE}.{fn}: x2d's last axis K={x.shape[1]} is not a multiple of the "
                         f"MX block size {BLOCK}; pad K to a multiple of {BLOCK}")
    return x


def bits_view(t: torch.Tensor) -> torch.Tensor:
    """fp32 / bf16 tensors go to the kernels as int32 / int16 views (exact bit handling)."""
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16)
    return t


def pack_code(fmt: ElemFormat, layout: str) -> int:
    if layout == "unpacked" or fmt.bits == 8:
        return 0
    return 1 if fmt.bits == 4 else 2


def quantize_constexprs(fmt: ElemFormat, layout: str, dtype: torch.dtype, rounding: str,
                        rows16b: bool, cvt: int = 0, asm: bool = False,
                        lanes: bool = False, word_io: bool = False,
                        lane_words: bool = False) -> dict:
    """_quantize_kernel's constexprs (also tools/sass_quant.py's); `rows16b`: packed mxfp6
    data whose row stride in int32 words is a multiple of 4 (16-byte vector stores); `cvt`:
    hw_cvt's CVT code (0: `encode`), `lanes`: fp4_lanes' path, each through PTX where
    `asm` (`lane_words`: on whole words); `word_io`: the packed layouts' codes as a thread's 8
    elements (packed_codes)."""
    pack = pack_code(fmt, layout)
    consts = format_constexprs(fmt)
    rcode = ROUNDING_CODE[check_rounding(rounding)]
    shift = hw_cvt.carrier(fmt)[1] if cvt else 0
    consts.update(IN_KIND=KIND_OF_DTYPE[dtype], ROUNDING=rcode, PACK=pack,
                  ROW16B=pack == 2 and rows16b, CVT=cvt, CVT_SHIFT=shift,
                  CVT_CLAMP=hw_cvt.clamp_of(fmt, shift, rounding) if cvt else 0.0,
                  CVT_ASM=bool(cvt) and asm, LANES=lanes, LANES_ASM=lanes and asm,
                  WORD_IO=word_io and pack != 0, LANE_WORDS=lanes and lane_words)
    return consts


def dequantize_constexprs(fmt: ElemFormat, layout: str, out_dtype: torch.dtype,
                          hw_cast: bool, cvt: int = 0, sat_cast: bool = False,
                          word_io: bool = False) -> dict:
    """_dequantize_kernel's constexprs (also tools/sass_quant.py's); `cvt` as for quantize,
    through PTX where `hw_cast` (a compiled kernel); `sat_cast`: hw_cvt.sat_cast_here's;
    `word_io`: as for quantize."""
    consts = format_constexprs(fmt)
    for name in ("EMAX", "MAX_NORMAL", "MAXN_MANT", "MAXN_SUB"):
        consts.pop(name)
    consts.update(OUT_KIND=KIND_OF_DTYPE[out_dtype], PACK=pack_code(fmt, layout),
                  HW_CAST=hw_cast, CVT=cvt, CVT_SHIFT=hw_cvt.carrier(fmt)[1] if cvt else 0,
                  CVT_ASM=bool(cvt) and hw_cast, SAT_CAST=sat_cast,
                  WORD_IO=word_io and pack_code(fmt, layout) != 0)
    return consts


def quantize(x2d: torch.Tensor, fmt: ElemFormat, rounding: str,
             layout: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x2d [R, K] fp32/bf16/fp16, K % 32 == 0 -> (data uint8 [R, bytes_per_row(fmt, layout, K)],
    scales uint8 [R, K // 32]); layout None means the format's default."""
    x = _check_input(x2d, "quantize")
    fmt = _format(fmt)
    layout = resolve_layout(fmt, layout)
    check_rounding(rounding)
    r, k = x.shape
    pack = pack_code(fmt, layout)
    sm = device_platform(x.device).sm
    cvt = hw_cvt.cvt_here(fmt, _INTERPRETED, sm)
    rows16 = launcher.rows_aligned(x)  # else no PTX on a thread's consecutive elements (the
    # half-lanes' pairs, hw_cvt's mxfp6 groups): only these rows' vector layout makes them
    # K-neighbours (an H100 gave wrong codes elsewhere, 2026-12-05)
    lanes = fp4_lanes.lanes_here(fmt.name, KIND_OF_DTYPE[x.dtype], pack, _INTERPRETED, sm)
    on_words = lanes and fp4_lanes.words_here(pack, x.data_ptr(), x.stride(0))
    lanes = lanes and (on_words or rows16)  # the half-lanes: in 16-byte vectors only
    scales = torch.empty((r, k // BLOCK), dtype=torch.uint8, device=x.device)
    if pack == 2:  # written as int32 words, returned as their little-endian bytes
        words = torch.empty((r, 3 * k // 16), dtype=torch.int32, device=x.device)
        data = words.view(torch.uint8)
    else:
        words = data = torch.empty((r, bytes_per_row(fmt, layout, k)), dtype=torch.uint8,
                                   device=x.device)
    if r and k:
        consts = quantize_constexprs(fmt, layout, x.dtype, rounding, words.stride(0) % 4 == 0,
                                     cvt, asm=not _INTERPRETED and (rows16 or pack != 2),
                                     lanes=lanes, word_io=word_io_here(pack),
                                     lane_words=on_words)
        _launch(_quantize_kernel, (bits_view(x), words, scales), r, k,
                (x.stride(0), words.stride(0), scales.stride(0)), consts)
    return data, scales


def dequantize(data: torch.Tensor, scales: torch.Tensor, fmt: ElemFormat, layout: str | None,
               k: int, out_dtype: torch.dtype) -> torch.Tensor:
    """-> [R, k] out_dtype: code value * 2**E in fp32 (exact or overflowing), saturated to
    out_dtype's finite max unless the code is an Inf, then cast to out_dtype (RNE).
    Any byte decodes per the spec; a scale byte 0xFF makes its block NaN."""
    fmt = _format(fmt)
    layout = resolve_layout(fmt, layout)
    data = _check_tensor(data, "data", "dequantize")
    scales = _check_tensor(scales, "scales", "dequantize")
    if out_dtype not in KIND_OF_DTYPE:
        raise ValueError(f"{_WHERE}.dequantize: out_dtype {out_dtype} is not float32, bfloat16 "
                         "or float16")
    if not isinstance(k, int) or k < 0 or k % BLOCK:
        raise ValueError(f"{_WHERE}.dequantize: k={k!r} must be a non-negative multiple of {BLOCK}")
    r = data.shape[0]
    want_data, want_scales = (r, bytes_per_row(fmt, layout, k)), (r, k // BLOCK)
    for name, t, want in (("data", data, want_data), ("scales", scales, want_scales)):
        if t.dtype != torch.uint8 or tuple(t.shape) != want:
            raise ValueError(f"{_WHERE}.dequantize: {name} must be uint8 of shape {want} for "
                             f"{fmt.name} ({layout}) with k={k}, got {t.dtype} {tuple(t.shape)}")
    if scales.device != data.device:
        raise ValueError(f"{_WHERE}.dequantize: data is on {data.device} but scales on "
                         f"{scales.device}; move both to one device")
    pack = pack_code(fmt, layout)
    if pack == 2:
        try:
            data = data.view(torch.int32)
        except RuntimeError:  # row stride or offset not word aligned: read a dense copy
            data = data.clone().view(torch.int32)
    out = torch.empty((r, k), dtype=out_dtype, device=data.device)
    if r and k:
        sm = device_platform(data.device).sm
        consts = dequantize_constexprs(
            fmt, layout, out_dtype, hw_cast=not _INTERPRETED,
            cvt=hw_cvt.cvt_here(fmt, _INTERPRETED, sm),
            sat_cast=hw_cvt.sat_cast_here(fmt, KIND_OF_DTYPE[out_dtype], _INTERPRETED, sm),
            word_io=word_io_here(pack))
        _launch(_dequantize_kernel, (data, scales, bits_view(out)), r, k,
                (data.stride(0), scales.stride(0), out.stride(0)), consts)
    return out


def qdq(x2d: torch.Tensor, fmt: ElemFormat, rounding: str) -> torch.Tensor:
    """dequantize(*quantize(x2d, fmt, rounding), out_dtype=x2d.dtype), bit for bit, in one
    fused kernel (codes never reach memory): a qdq_plan.QdqPlan built for the call."""
    from kernels.triton.qdq_plan import QdqPlan  # (it builds on this module)

    x = _check_input(x2d, "qdq")
    return QdqPlan(fmt, rounding, x.dtype, x.shape[1])(x)
