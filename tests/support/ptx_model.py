"""A small CPU interpreter of the PTX our inline-asm strings use, so CPU CI runs each string
against its Triton / torch twin (tests/kernels/triton/test_wgmma_ptx.py, test_hw_cvt.py).

Modelled: and / or / shl / shr / shf.r.wrap / add / sub / prmt on 32-bit words, max.u16x2; mov.b32 of a word, of two
16-bit halves into a word (`mov.b32 d, {lo, hi}`) and out of one (`mov.b32 {lo, hi}, a`);
mul.rn.bf16x2 as the identity (the wgmma decoders' callers compare the patterns before the
scale) or, with bf16_math, as add.rn / min do, through fp32; mul.rn.f16x2 as numpy's f16
multiply; and the conversions cvt.rn.satfinite.{e4m3,e5m2,bf16,f16}x2.f32,
cvt.rn.f16x2.{e4m3,e5m2}x2 and cvt.f32.f16 through ml_dtypes' / numpy's round-to-nearest-even
casts, an oracle written apart from ours (kernels.reference, mx_codec).
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np

MASK = 0xFFFFFFFF
_FP8 = {"e4m3": (ml_dtypes.float8_e4m3fn, 448.0), "e5m2": (ml_dtypes.float8_e5m2, 57344.0)}


def cvt_fp8(bits: int, fp8: str) -> int:
    """PTX cvt.rn.satfinite.<fp8>x2.f32 of one fp32 (bit pattern): the fp8 byte, rounded to
    nearest even, a finite value past the max finite saturated to it (PTX ISA: satfinite), NaN
    to the canonical NaN 0x7F."""
    dtype, top = _FP8[fp8]
    value = np.array([bits & MASK], dtype=np.uint32).view(np.float32)
    if np.isnan(value[0]):
        return 0x7F
    value = np.clip(value, -top, top)  # saturate before rounding: the same RNE result
    return int(value.astype(dtype).view(np.uint8)[0])


def cvt_sat16(bits: int, dtype: str) -> int:
    """PTX cvt.rn.satfinite.<bf16|f16>x2.f32 of one fp32: the 16-bit pattern, RNE, a finite
    value past the max or an Inf -> +-max, NaN -> the canonical NaN 0x7FFF."""
    np_dtype = ml_dtypes.bfloat16 if dtype == "bf16" else np.float16
    value = np.array([bits & MASK], dtype=np.uint32).view(np.float32)
    if np.isnan(value[0]):
        return 0x7FFF
    top = float(ml_dtypes.finfo(np_dtype).max)
    return int(np.clip(value, -top, top).astype(np_dtype).view(np.uint16)[0])


def f16_of_fp8(byte: int, fp8: str) -> int:
    """PTX cvt.rn.f16x2.<fp8>x2 of one byte: the f16 pattern (every e4m3 / e5m2 value is an f16
    value; NaN -> 0x7FFF)."""
    value = np.array([byte & 0xFF], dtype=np.uint8).view(_FP8[fp8][0]).astype(np.float32)
    if np.isnan(value[0]):
        return 0x7FFF
    return int(value.astype(np.float16).view(np.uint16)[0])


def _f16(bits: int) -> np.ndarray:
    return np.array([bits & 0xFFFF], dtype=np.uint16).view(np.float16)


def _bf16x2(fn, a: int, b: int) -> int:
    """fn on each bf16 half of two words, rounded once to bf16 (nearest even): the halves' sum
    or product is exact in fp32 for the operands our PTX gives it (at most 16 significant
    bits, exponents within 24 of each other), so fp32 then bf16 is one rounding."""
    out = 0
    for shift in (0, 16):
        x = np.array([(a >> shift) & 0xFFFF, (b >> shift) & 0xFFFF], np.uint16)
        x = x.view(ml_dtypes.bfloat16).astype(np.float32)
        r = np.array([fn(x[0], x[1])], np.float32).astype(ml_dtypes.bfloat16)
        out |= int(r.view(np.uint16)[0]) << shift
    return out


def _prmt(a: int, b: int, sel: int) -> int:
    """prmt.b32 (default mode): result byte i is byte (sel's nibble i & 7) of {b, a}."""
    pool = (a & MASK) | (b & MASK) << 32
    return sum(((pool >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))


def run_ptx(asm: str, inputs: dict[str, int], bf16_math: bool = False) -> dict[str, int]:
    """Execute the asm body on ints; `inputs` maps operand names ("$8", ...) to values (32-bit
    words; fp32 operands as their bit patterns). Returns every "$" operand after the run.
    bf16_math: mul.rn.bf16x2 multiplies (else it is the identity, for the wgmma decoders'
    patterns before their scale)."""
    regs = dict(inputs)
    body = re.sub(r"\.reg[^;]*;", "", asm).strip()
    body = re.sub(r"^\{|\}$", "", body)  # the block braces; a mov's braces stay
    for ins in filter(None, (i.strip() for i in body.split(";"))):
        op, args = ins.split(None, 1)
        if op == "mov.b32" and "{" in args:
            names = re.findall(r"[$\w]+", args)
            if args.strip().startswith("{"):  # mov.b32 {lo, hi}, a
                lo, hi, src = names
                regs[lo], regs[hi] = regs[src] & 0xFFFF, regs[src] >> 16
            else:  # mov.b32 d, {lo, hi}
                d, lo, hi = names
                regs[d] = (regs[lo] & 0xFFFF) | ((regs[hi] & 0xFFFF) << 16)
            continue
        d, *src = [a.strip() for a in args.split(",")]
        v = [regs[a] if a in regs else int(a, 0) for a in src]
        if op == "mov.b32":
            r = v[0] & MASK
        elif op == "and.b32":
            r = v[0] & v[1]
        elif op == "or.b32":
            r = v[0] | v[1]
        elif op == "shl.b32":
            r = (v[0] << v[1]) & MASK
        elif op == "shr.b32":
            r = (v[0] & MASK) >> v[1]
        elif op == "shf.r.wrap.b32":  # funnel shift of (hi:lo) right by n & 31
            n = v[2] & 31
            r = (((v[1] << 32) | v[0]) >> n) & MASK
        elif op == "add.u32":
            r = (v[0] + v[1]) & MASK
        elif op == "mul.rn.bf16x2":
            r = _bf16x2(np.multiply, v[0], v[1]) if bf16_math else v[0]
        elif op == "add.rn.bf16x2":
            r = _bf16x2(np.add, v[0], v[1])
        elif op == "min.bf16x2":
            r = _bf16x2(np.fmin, v[0], v[1])
        elif op == "max.u16x2":
            r = max(v[0] & 0xFFFF, v[1] & 0xFFFF) | max(v[0] >> 16, v[1] >> 16) << 16
        elif op == "sub.u32":
            r = (v[0] - v[1]) & MASK
        elif op == "prmt.b32":
            r = _prmt(v[0], v[1], v[2])
        elif op == "mul.rn.f16x2":
            halves = [int((_f16(v[0] >> s) * _f16(v[1] >> s)).view(np.uint16)[0])
                      for s in (0, 16)]
            r = halves[0] | halves[1] << 16
        elif (m := re.fullmatch(r"cvt\.rn\.satfinite\.(e4m3|e5m2)x2\.f32", op)):
            # d = {hi: cvt(a), lo: cvt(b)}
            r = (cvt_fp8(v[0], m.group(1)) << 8) | cvt_fp8(v[1], m.group(1))
        elif (m := re.fullmatch(r"cvt\.rn\.satfinite\.(bf16|f16)x2\.f32", op)):
            r = (cvt_sat16(v[0], m.group(1)) << 16) | cvt_sat16(v[1], m.group(1))
        elif (m := re.fullmatch(r"cvt\.rn\.f16x2\.(e4m3|e5m2)x2", op)):
            # d = {hi: f16(a's high byte), lo: f16(a's low byte)}
            r = f16_of_fp8(v[0], m.group(1)) | f16_of_fp8(v[0] >> 8, m.group(1)) << 16
        elif op == "cvt.f32.f16":
            r = int(_f16(v[0]).astype(np.float32).view(np.uint32)[0])
        else:
            raise AssertionError(f"instruction {op!r} is not modelled: extend run_ptx")
        regs[d] = r
    return {k: v for k, v in regs.items() if k.startswith("$")}
