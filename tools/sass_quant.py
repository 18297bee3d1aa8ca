"""Offline SASS instructions per element of the Triton MX quantize / dequantize kernels.

    PYTHONPATH=/tmp/t36site python tools/sass_quant.py --kernel quantize --dtype bf16 \
        [--formats mxfp4,mxint8] [--layouts packed,unpacked] [--cvt] [--hist] [--tile 16x512w8]
        [--word-io]

Why: an instruction count is what a change to the element math moves, and it can be read
without a GPU. It does not predict the time: on 2026-12-03 (H200) two versions with a quarter
fewer instructions an element ran 9-20 % slower (docs/benchmarks.md part 12), so time every
change on the GPU as well. Each variant is compiled for sm_90a (`triton.compile` with a
GPUTarget, ptxas from the triton wheel) and its SASS (cuobjdump) counted. This also checks
that every variant compiles with the triton installed (the H200 runs 3.6: put a 3.6 install
first on PYTHONPATH).

Also reported: registers a thread (cuobjdump --dump-resource-usage), which set how many programs
an SM holds.

Counted: every instruction line up to the last EXIT (the trailing BRA-to-self and NOP padding
are not run). The kernels have no loops, so a thread runs each counted instruction at most once.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DTYPES = ("bf16", "fp16", "fp32")
KERNELS = ("quantize", "dequantize")
# an instruction line: cuobjdump's "/*0040*/  OPCODE ..." or Triton's "ctrl<TAB>OPCODE ..."
# (asm["sass"]), with an optional predicate guard
_INSTR = re.compile(r"^\s*(?:/\*[0-9a-f]{4,}\*/|[-0-9:A-Y]+\t)\s*(@!?U?P\w+\s+)?"
                    r"([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)", re.M)


def count_instructions(sass: str) -> int:
    """Instructions of one kernel's SASS text (cuobjdump -sass) up to and including its last
    EXIT: the BRA-to-self and NOPs after it only pad the code."""
    ops = [m.group(2) for m in _INSTR.finditer(sass)]
    last_exit = max((i for i, op in enumerate(ops) if op == "EXIT"), default=len(ops) - 1)
    return last_exit + 1


def opcode_histogram(sass: str) -> dict[str, int]:
    """{opcode without modifiers: count} of the counted instructions (what to cut next)."""
    ops = [m.group(2).split(".")[0] for m in _INSTR.finditer(sass)]
    last_exit = max((i for i, op in enumerate(ops) if op == "EXIT"), default=len(ops) - 1)
    hist: dict[str, int] = {}
    for op in ops[:last_exit + 1]:
        hist[op] = hist.get(op, 0) + 1
    return dict(sorted(hist.items(), key=lambda kv: -kv[1]))


def variants(kernel: str, formats: list[str], layouts: list[str]) -> list[tuple[str, str]]:
    """(format, layout) pairs that exist (8-bit formats have no packed layout)."""
    from kernels.spec.formats import FORMATS
    out = []
    for name in formats:
        for layout in layouts:
            if FORMATS[name].bits == 8 and layout == "packed":
                continue
            out.append((name, layout))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from kernels.spec.formats import FORMATS, LAYOUTS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernel", choices=KERNELS, default="quantize")
    p.add_argument("--dtype", choices=DTYPES, default="bf16",
                   help="quantize input / dequantize output dtype")
    p.add_argument("--formats", default=",".join(FORMATS), help="comma-separated formats")
    p.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated layouts")
    p.add_argument("--rounding", default="even")
    p.add_argument("--hist", action="store_true", help="print each variant's opcode counts")
    p.add_argument("--cvt", action="store_true",
                   help="also the variant converting through fp8 (kernels/triton/hw_cvt.py), "
                        "where the format has an fp8 carrier")
    p.add_argument("--word-io", action="store_true",
                   help="the packed layouts' codes as a thread's 8 elements (packed_codes' "
                        "FP4_WORD_IO_VERIFIED / FP6_HALVES_VERIFIED)")
    p.add_argument("--lane-words", action="store_true",
                   help="bf16 mxfp4's lanes on whole words (fp4_lanes.LANE_WORDS_VERIFIED; "
                        "with --cvt)")
    p.add_argument("--tile", default="",
                   help="ROWSxKwWARPS (e.g. 16x512w8) in place of the shipped tiles "
                        "(quant_tiles.TILE_OVERRIDE; what tools/bench_quant.py --tiles times)")
    args = p.parse_args(argv)
    args.formats = [f for f in args.formats.split(",") if f]
    args.layouts = [lay for lay in args.layouts.split(",") if lay]
    for name in args.formats:
        if name not in FORMATS:
            p.error(f"unknown format {name!r}; valid: {', '.join(FORMATS)}")
    for lay in args.layouts:
        if lay not in LAYOUTS:
            p.error(f"unknown layout {lay!r}; valid: {', '.join(LAYOUTS)}")
    return args


def torch_dtype(name: str):  # noqa: ANN201 (torch is imported late)
    """The torch dtype of a DTYPES name."""
    import torch
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def registers(cubin: bytes) -> int:
    """Registers a thread of a compiled kernel (cuobjdump --dump-resource-usage): what decides
    how many programs an SM holds (the quantize kernel's 4-warp programs: 16 at 32)."""
    import subprocess
    import tempfile

    from triton import knobs
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        out = subprocess.run([knobs.nvidia.cuobjdump.path, "--dump-resource-usage", path],
                             capture_output=True, text=True, check=True).stdout
    return int(re.search(r"REG:(\d+)", out).group(1))


def data_pointer(pack: int) -> str:
    """The codes' pointer type the launches pass for layout code `pack` (mx_quant.quantize /
    dequantize): int32 words for packed mxfp6 (PACK 2), bytes otherwise. (Until 2026-12-05 the
    packed mxfp4 dequantize was compiled here on int32: other loads, 34 registers, not 40.)"""
    return "*i32" if pack == 2 else "*u8"


def compile_sass(kernel: str, name: str, layout: str, dtype: str, rounding: str,
                 cvt: bool = False, info: dict | None = None,
                 tile_override: tuple[int, int, int] | None = None,
                 word_io: bool = False, lane_words: bool = False) -> tuple[str, int]:
    """(SASS text, elements one thread owns) of one variant, compiled for sm_90a; `cvt`: the
    GPU-instruction paths (hw_cvt, fp4_lanes) where the variant has one; `info` (a dict)
    receives the kernel's "registers"."""
    import triton
    from triton.backends.compiler import GPUTarget

    from kernels.spec.formats import get_format
    from kernels.triton import fp4_lanes, hw_cvt, mx_quant, quant_tiles
    from kernels.triton.mx_codec import KIND_OF_DTYPE
    tdtype = torch_dtype(dtype)
    elem = {"bf16": "*i16", "fp16": "*fp16", "fp32": "*i32"}[dtype]
    fmt = get_format(name)
    pack = mx_quant.pack_code(fmt, layout)
    if kernel == "quantize":
        fn = mx_quant._quantize_kernel
        code = hw_cvt.carrier(fmt)[0] if cvt else 0
        lanes = cvt and fp4_lanes.lanes_fit(name, KIND_OF_DTYPE[tdtype], pack)
        consts = mx_quant.quantize_constexprs(fmt, layout, tdtype, rounding, rows16b=True,
                                              cvt=code, asm=True, lanes=lanes,
                                              word_io=word_io, lane_words=lane_words)
        ptrs = {"x_ptr": elem, "data_ptr": data_pointer(pack), "scale_ptr": "*u8"}
    else:
        fn = mx_quant._dequantize_kernel
        code = hw_cvt.carrier(fmt)[0] if cvt else 0
        sat = cvt and hw_cvt.sat_cast_fits(fmt, KIND_OF_DTYPE[tdtype])
        consts = mx_quant.dequantize_constexprs(fmt, layout, tdtype, hw_cast=True, cvt=code,
                                                sat_cast=sat, word_io=word_io)
        ptrs = {"data_ptr": data_pointer(pack), "scale_ptr": "*u8", "out_ptr": elem}
    if tile_override is None:
        tile, warps = quant_tiles.gpu_tile(kernel, pack), quant_tiles.gpu_warps(kernel, pack)
    else:  # (rows, K, warps), as a TILE_OVERRIDE entry would give it
        tile, warps = {"BLOCK_R": tile_override[0], "BLOCK_K": tile_override[1]}, tile_override[2]
    consts.update(tile)
    sig, attrs = {}, {}
    for i, arg in enumerate(fn.arg_names):
        if arg in consts:
            sig[arg] = "constexpr"
        elif arg in ptrs:
            sig[arg] = ptrs[arg]
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:  # R, K, strides: an 8192 x 8192 tensor's (multiples of 16)
            sig[arg] = "i32"
            attrs[(i,)] = [["tt.divisibility", 16]]
    consts = {k: v for k, v in consts.items() if k in fn.arg_names}
    src = triton.compiler.ASTSource(fn, sig, consts, attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps})
    per_thread = tile["BLOCK_R"] * tile["BLOCK_K"] // (32 * warps)
    if info is not None:
        info["registers"] = registers(compiled.asm["cubin"])
    return compiled.asm["sass"], per_thread


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)  # before kernels.triton is imported
    import triton
    from kernels.triton.quant_tiles import tile_override
    try:
        tile = tile_override(args.tile) if args.tile else None
    except ValueError as err:
        sys.exit(f"sass_quant: --tile {err}")
    print(f"triton {triton.__version__}, sm_90a, {args.kernel}, dtype {args.dtype}")
    from kernels.spec.formats import get_format
    from kernels.triton.fp4_lanes import lanes_fit
    from kernels.triton.hw_cvt import carrier
    from kernels.triton.mx_codec import KIND_OF_DTYPE
    from kernels.triton.mx_quant import pack_code
    kind = KIND_OF_DTYPE[torch_dtype(args.dtype)]
    print("| format | layout | path | instructions | elements/thread | per element | registers |")
    print("|---|---|---|---|---|---|---|")
    for name, layout in variants(args.kernel, args.formats, args.layouts):
        paths = [False]
        fmt = get_format(name)
        lanes = lanes_fit(name, kind, pack_code(fmt, layout))
        if args.cvt and (carrier(fmt)[0] or args.kernel == "dequantize" or lanes):
            paths.append(True)
        for cvt in paths:
            info: dict = {}
            sass, per_thread = compile_sass(args.kernel, name, layout, args.dtype,
                                            args.rounding, cvt, info, tile, args.word_io,
                                            args.lane_words)
            n = count_instructions(sass)
            path = ("hw cvt" if cvt else "encode") if args.kernel == "quantize" else (
                "hw cvt" if cvt else "decode")
            print(f"| {name} | {layout} | {path} | {n} | {per_thread} | {n / per_thread:.1f} "
                  f"| {info['registers']} |")
            if args.hist:
                print("  " + ", ".join(f"{op} {c}" for op, c in opcode_histogram(sass).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
