"""Check and time the Triton MX quantize / dequantize / QDQ kernels against the torch reference.

    python tools/bench_quant.py [--quick] [--shape 8192x8192] [--out results.json]
        [--kernels quantize,dequantize,qdq] [--hw-cvt gate|off|on|both]
        [--tiles 16x256w4,32x256w4,16x512w8] [--word-io gate|off|on|both]

For every format x layout x rounding (--quick: a subset), on a bf16 [R, K] input:
1. bits: Triton == kernels.reference.mx for quantize (data + scales), dequantize (-> bf16) and
   qdq, on the benchmark shape and on small random shapes holding special blocks (NaN, +-Inf,
   zero, fp32 subnormals, ties, huge values); any mismatch makes the exit status 1;
2. time (median; CUDA: triton.testing.do_bench, inputs rotated over >= 3 buffers so L2 does
   not hold them) Triton quantize / dequantize / qdq and the same reference functions, and the
   device-to-device copy bandwidth (a ~1 GiB buffer, bytes = read + write);
3. print a markdown table (kernel, format, layout, rounding, us, TB/s, % of copy BW, speed-up
   over the reference, and the CUDA-graph time and the tile as cross-checks) under the
   device, torch / triton versions and date; --out writes JSON.
--hw-cvt both times quantize / dequantize with the GPU-instruction paths (kernels/triton/hw_cvt.py,
fp4_lanes.py) off and then on, one row each ("hw cvt" in the config column), bits checked both
ways. --tiles times quantize / dequantize under each listed tile (rows x K x warps, through
quant_tiles.TILE_OVERRIDE) beside the shipped one, bits checked under each: the tiles were chosen
on 2026-11-29 / 12-03, before the GPU-instruction paths changed each element's work.
--word-io both times the packed layouts with their codes moved as a thread's 8 elements off
and on (packed_codes' FP4_WORD_IO_VERIFIED: mxfp4's 4-byte moves, FP6_HALVES_VERIFIED: mxfp6's
half groups; and fp4_lanes.LANE_WORDS_VERIFIED: bf16 packed mxfp4's lanes on whole words), "word
io" / "lane words" in the config column.
Without a GPU it runs (slowly) in Triton's interpreter: `--quick --shape 64x128`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import sys
import warnings
from pathlib import Path

import torch

if not torch.cuda.is_available():  # before kernels.triton is imported: Triton reads it then
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # the interpreter's numpy reports intended overflows to Inf (large scales, fp16 casts) and
    # the Inf - Inf of NaN / Inf blocks, whose results the kernels discard
    warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
    warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton  # noqa: E402

from kernels.spec.formats import FORMATS, ROUNDINGS, bytes_per_row  # noqa: E402
from kernels.spec.platform import device_platform  # noqa: E402
from gates import setting  # noqa: E402
from timing import median_ms  # noqa: E402
from kernels.reference import mx as ref  # noqa: E402
from kernels.triton import fp4_lanes, hw_cvt, packed_codes, quant_tiles  # noqa: E402
from kernels.triton import mx_quant as tri  # noqa: E402

ROTATE = 4  # input buffers cycled through while timing
QUICK = [("mxfp4", "packed"), ("mxfp6_e3m2", "unpacked"), ("mxfp6_e2m3", "packed"),
         ("mxfp8_e4m3", "unpacked"), ("mxint8", "unpacked")]


def cases(quick: bool, roundings: tuple[str, ...] = ROUNDINGS) -> list[tuple[str, str, str]]:
    if quick:
        return [(n, lay, "even") for n, lay in QUICK]
    fmt_layouts = [(n, lay) for n, f in FORMATS.items()
                   for lay in (("packed", "unpacked") if f.bits < 8 else ("unpacked",))]
    return [(n, lay, r) for n, lay in fmt_layouts for r in roundings]


def rotating(fn, inputs: list[tuple]):
    cycle = itertools.cycle(inputs)
    return lambda: fn(*next(cycle))


def graph_ms(fn, inputs: list[tuple], device: str) -> float | None:
    """Median ms of one call when all rotations replay from a CUDA graph: no CPU launch
    overhead (a cross-check of do_bench's number); None off CUDA."""
    if device != "cuda":
        return None
    import triton.testing

    def all_inputs() -> None:
        for args in inputs:
            fn(*args)
    ms = triton.testing.do_bench_cudagraph(all_inputs, rep=200, return_mode="median")
    return float(ms) / len(inputs)


def copy_bandwidth(device: str) -> float:
    """TB/s of dst.copy_(src) (read + write bytes) on ~1 GiB (64 MiB on a CPU)."""
    n = (1 << 30 if device == "cuda" else 1 << 26) // 2
    src = torch.randn(n, device=device, dtype=torch.float32).to(torch.bfloat16)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), device)
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e12


def special_input(r: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """[r, k] fp32: random blocks at scales 2**[-30, 30] plus NaN / +-Inf / zero / -0 / subnormal /
    tie / huge blocks at random places."""
    nb = k // 32
    x = torch.randn(r * nb, 32, generator=gen) * torch.exp2(
        torch.randint(-30, 30, (r * nb, 1), generator=gen).float())
    ties = torch.tensor([0.25, 0.75, 1.25, 2.5, 3.5, 5.0, 0.0625, 0.1875] * 4)
    specials = [torch.full((32,), math.nan), torch.full((32,), math.inf),
                torch.full((32,), -math.inf),
                torch.zeros(32), torch.full((32,), -0.0), torch.randn(32, generator=gen) * 1e-39,
                ties, ties * 2.0**-10 * 7, torch.randn(32, generator=gen) * 1e38,
                torch.tensor([0x007FFFFF, 0x007F0000] * 16, dtype=torch.int32).view(torch.float32)]
    specials[0][1:] = torch.randn(31, generator=gen)
    places = torch.randperm(r * nb, generator=gen)[: len(specials)]
    for place, block in zip(places.tolist(), specials):
        x[place] = block
    return x.view(r, k)


def same_bits(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal integers, or equal floats bit for bit with NaNs compared by position only."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if not got.dtype.is_floating_point:
        return torch.equal(got, want)
    nan = got.isnan()
    if not torch.equal(nan, want.isnan()):
        return False
    ints = torch.int32 if got.element_size() == 4 else torch.int16
    return torch.equal(got.view(ints)[~nan], want.view(ints)[~nan])


def check_bits(x: torch.Tensor, name: str, layout: str, rounding: str) -> list[str]:
    """Names of the outputs where Triton and the reference differ on `x`."""
    fmt, k = FORMATS[name], x.shape[1]
    data, scales = tri.quantize(x, fmt, rounding, layout)
    want_data, want_scales = ref.quantize(x, fmt, rounding, layout)
    bad = [what for what, g, w in (("data", data, want_data), ("scales", scales, want_scales))
           if not same_bits(g, w)]
    for out_dtype in {torch.bfloat16, x.dtype}:
        if not same_bits(tri.dequantize(data, scales, fmt, layout, k, out_dtype),
                         ref.dequantize(want_data, want_scales, fmt, layout, k, out_dtype)):
            bad.append(f"dequantize->{str(out_dtype).split('.')[-1]}")
    if not same_bits(tri.qdq(x, fmt, rounding), ref.qdq(x, fmt, rounding)):
        bad.append("qdq")
    return bad


def paths(choice: str) -> list[bool | None]:
    """The gates of the GPU-instruction paths (hw_cvt, fp4_lanes) a case runs under: None as
    they stand, else forced off / on / both ways (quantize of unpacked mxfp4 and of mxint8 has
    no such path: its two rows time one kernel twice, the run's spread)."""
    return {"gate": [None], "off": [False], "on": [True], "both": [False, True]}[choice]


def parse_tiles(text: str) -> list[tuple[int, int, int] | None]:
    """'16x256w4,32x256w8' -> [None (the shipped tile), (16, 256, 4), (32, 256, 8)]; a bad
    entry raises ValueError naming it and the form."""
    tiles: list[tuple[int, int, int] | None] = [None]
    for item in filter(None, (t.strip() for t in text.split(","))):
        try:
            tiles.append(quant_tiles.tile_override(item))
        except ValueError as err:
            raise ValueError(f"--tiles {err}") from None
    return tiles


def run_case(name: str, layout: str, rounding: str, shape: tuple[int, int], device: str,
             copy_tbs: float, time_reference: bool, seed: int,
             only: tuple = ("quantize", "dequantize", "qdq"),
             cvt: bool | None = None, tile: tuple[int, int, int] | None = None,
             word_io: bool | None = None) -> tuple[list[dict], list[str]]:
    """One case's bit checks and timings; `cvt` sets the hw_cvt / fp4_lanes gates for it,
    `word_io` packed_codes' FP4_WORD_IO_VERIFIED and FP6_HALVES_VERIFIED, and fp4_lanes'
    LANE_WORDS_VERIFIED (None: as they are);
    `tile` (rows, K, warps) replaces quantize's and dequantize's tile for it (None: the
    shipped one). Rows for qdq only where neither a tile nor the GPU-instruction paths are
    forced (it takes neither)."""
    pack = tri.pack_code(FORMATS[name], layout)
    override = {} if tile is None else {(kernel, pack): tile
                                        for kernel in ("quantize", "dequantize")}
    if cvt or tile is not None:
        only = tuple(k for k in only if k != "qdq")
    with setting(hw_cvt, CVT_VERIFIED=cvt), \
            setting(fp4_lanes, FP4_LANES_VERIFIED=cvt, LANE_WORDS_VERIFIED=word_io), \
            setting(packed_codes, FP4_WORD_IO_VERIFIED=word_io, FP6_HALVES_VERIFIED=word_io), \
            setting(quant_tiles,
                    TILE_OVERRIDE={**quant_tiles.TILE_OVERRIDE, **override} if override else None):
        return _run_case(name, layout, rounding, shape, device, copy_tbs, time_reference, seed,
                         only)


def _run_case(name: str, layout: str, rounding: str, shape: tuple[int, int], device: str,
              copy_tbs: float, time_reference: bool, seed: int,
              only: tuple) -> tuple[list[dict], list[str]]:
    fmt = FORMATS[name]
    r, k = shape
    gen = torch.Generator().manual_seed(seed)
    problems = []
    # 1. bits: small (fixed and random) shapes with special blocks, then the benchmark shape
    small_shapes = [(37, 160), (5, 32)] + [
        (int(torch.randint(1, 80, (), generator=gen)),
         32 * int(torch.randint(1, 20, (), generator=gen))) for _ in range(2)]
    for small_r, small_k in small_shapes:
        x = special_input(small_r, small_k, gen)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            bad = check_bits(x.to(device=device, dtype=dtype), name, layout, rounding)
            problems += [f"{name} {layout} {rounding} [{small_r}x{small_k}] {dtype}: {b}"
                         for b in bad]
    xs = [(torch.randn(r, k, generator=gen) * torch.exp2(torch.randint(-8, 8, (r, k // 32, 1),
           generator=gen).float()).repeat_interleave(32, 2).view(r, k)).to(device, torch.bfloat16)
          for _ in range(ROTATE)]
    problems += [f"{name} {layout} {rounding} [{r}x{k}] bf16: {b}"
                 for b in check_bits(xs[0], name, layout, rounding)]
    # 2. time
    q_inputs = [tri.quantize(x, fmt, rounding, layout) for x in xs]
    data_bytes = r * bytes_per_row(fmt, layout, k) + r * (k // 32)
    in_bytes = r * k * xs[0].element_size()
    kernels = {
        "quantize": (lambda x: tri.quantize(x, fmt, rounding, layout),
                     lambda x: ref.quantize(x, fmt, rounding, layout), [(x,) for x in xs],
                     in_bytes + data_bytes),
        "dequantize": (lambda d, s: tri.dequantize(d, s, fmt, layout, k, torch.bfloat16),
                       lambda d, s: ref.dequantize(d, s, fmt, layout, k, torch.bfloat16),
                       q_inputs, data_bytes + in_bytes),
        "qdq": (lambda x: tri.qdq(x, fmt, rounding), lambda x: ref.qdq(x, fmt, rounding),
                [(x,) for x in xs], 2 * in_bytes),
    }
    rows = []
    for kernel, (tri_fn, ref_fn, inputs, nbytes) in kernels.items():
        if kernel not in only:
            continue
        ms = median_ms(rotating(tri_fn, inputs), device)
        pack = tri.pack_code(fmt, layout)
        config = ("interpreter" if tri._INTERPRETED
                  else f"{quant_tiles.gpu_tile(kernel, pack)}, "
                  f"num_warps {quant_tiles.gpu_warps(kernel, pack)}")
        sm = device_platform(device).sm
        lanes = fp4_lanes.lanes_here(name, 1, pack, tri._INTERPRETED, sm)
        if kernel != "qdq" and (hw_cvt.enabled(tri._INTERPRETED, sm) or lanes):
            config += ", hw cvt"
        if kernel != "qdq" and packed_codes.word_io_here(pack):
            config += ", word io"
        if kernel == "quantize" and lanes and fp4_lanes.words_here(pack, 0, 0):
            config += ", lane words"
        g_ms = graph_ms(tri_fn, inputs, device)
        ref_ms = median_ms(rotating(ref_fn, inputs), device) if time_reference else None
        tbs = nbytes / (ms * 1e-3) / 1e12
        rows.append(dict(kernel=kernel, format=name, layout=layout, rounding=rounding,
                         shape=[r, k], bytes=nbytes, us=ms * 1e3, tb_s=tbs,
                         pct_copy=100 * tbs / copy_tbs,
                         graph_us=None if g_ms is None else g_ms * 1e3,
                         ref_us=None if ref_ms is None else ref_ms * 1e3,
                         speedup=None if ref_ms is None else ref_ms / ms, config=config))
    return rows, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a subset of formats, rounding 'even'")
    parser.add_argument("--shape", default="8192x8192", help="RxK of the timed bf16 input")
    parser.add_argument("--roundings", default=",".join(ROUNDINGS),
                        help="comma-separated scale roundings to run (default: all)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--no-reference-time", action="store_true",
                        help="skip timing the (slow) torch reference")
    parser.add_argument("--kernels", default="quantize,dequantize,qdq",
                        help="comma-separated kernels to time (default: all three)")
    parser.add_argument("--hw-cvt", choices=("gate", "off", "on", "both"), default="gate",
                        help="quantize / dequantize through the GPU-instruction paths "
                             "(kernels/triton/hw_cvt.py, fp4_lanes.py): as their gates say, off, "
                             "on, or both, one row each")
    parser.add_argument("--word-io", choices=("gate", "off", "on", "both"), default="gate",
                        help="the packed layouts' codes moved as a thread's 8 elements "
                             "(packed_codes' FP4_WORD_IO_VERIFIED, FP6_HALVES_VERIFIED): as the "
                             "gates say, off, on, or both")
    parser.add_argument("--tiles", default="",
                        help="comma-separated ROWSxKwWARPS tiles (e.g. 16x512w8) to time "
                             "quantize / dequantize under, beside the shipped tile")
    args = parser.parse_args(argv)
    try:
        tiles = parse_tiles(args.tiles)
    except ValueError as err:
        parser.error(str(err))
    try:
        r, k = (int(v) for v in args.shape.lower().split("x"))
    except ValueError:
        parser.error(f"--shape {args.shape!r}: expected RxK, e.g. 8192x8192")
    if k % 32 or r <= 0:
        parser.error(f"--shape {args.shape!r}: K must be a multiple of 32 and R positive")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (Triton interpreter)"
    header = dict(device=name, torch=torch.__version__, triton=triton.__version__,
                  date=dt.datetime.now().isoformat(timespec="seconds"), shape=[r, k])
    print(f"# MX quantize kernels: {name}; torch {torch.__version__}; triton "
          f"{triton.__version__}; {header['date']}")
    copy_tbs = copy_bandwidth(device)
    print(f"D2D copy: {copy_tbs:.3f} TB/s; bf16 input {r}x{k}\n")
    print("| kernel | format | layout | rounding | time µs | TB/s | % copy BW "
          "| speed-up vs torch ref | graph µs | config |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---|")
    results, problems = [], []
    roundings = tuple(r.strip() for r in args.roundings.split(",") if r.strip())
    only = tuple(n.strip() for n in args.kernels.split(",") if n.strip())
    if not only or set(only) - {"quantize", "dequantize", "qdq"}:
        parser.error(f"--kernels {args.kernels!r}: a comma-separated subset of quantize, "
                     "dequantize, qdq")
    runs = [(case, cvt, tile, wio) for case in cases(args.quick, roundings)
            for cvt in paths(args.hw_cvt) for tile in tiles
            for wio in (paths(args.word_io) if case[1] == "packed" else [None])]
    for i, ((fmt_name, layout, rounding), cvt, tile, wio) in enumerate(runs):
        rows, bad = run_case(fmt_name, layout, rounding, (r, k), device, copy_tbs,
                             not args.no_reference_time, seed=i, only=only, cvt=cvt, tile=tile,
                             word_io=wio)
        problems += bad
        results += rows
        for row in rows:
            speedup = "-" if row["speedup"] is None else f"{row['speedup']:.1f}x"
            graph = "-" if row["graph_us"] is None else f"{row['graph_us']:.1f}"
            print(f"| {row['kernel']} | {fmt_name} | {layout} | {rounding} | {row['us']:.1f} | "
                  f"{row['tb_s']:.3f} | {row['pct_copy']:.1f} | {speedup} | {graph} | "
                  f"{row['config']} |", flush=True)
    print(f"\nbit checks: {'all equal' if not problems else f'{len(problems)} MISMATCHES'}")
    for line in problems:
        print("  MISMATCH", line)
    if args.out:
        args.out.write_text(json.dumps(dict(header, copy_tb_s=copy_tbs, results=results,
                                            mismatches=problems), indent=1))
        print(f"wrote {args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
