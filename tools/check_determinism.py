"""Check that every kernel gives the same bits run to run and from several threads at once.

    python tools/check_determinism.py [--device cuda|cpu] [--repeats 5] [--threads 4]
                                      [--quick] [--schemes a,b] [--out determinism.json]

Sections (each row: one case, N repeats on one prepared layer, one run on a FRESH prepared
weight and kernel instance, then T threads calling the same prepared layer at once, each
result compared bit for bit with the first; NaN-safe, through integer views):
  linear  every kernel runnable here x every scheme it accepts, M in {1, 16, 128, 1024}
          (N = K = 4096 / 4096 / 2048 / 1024), bf16 activations, resolved strategy;
  decode  each DecodeConfig linear_decode.default_config picks (split-K 1 / 2 / 4, split fp4
          layout, 2-D accumulator), forced at every M it is picked for (1, 4, 16, 64) on
          fp4 / fp6 / int8 weights, plus the tiled strategy forced at M = 128 (fp16);
  codec   mx_quantize / mx_dequantize / mx_qdq, triton and reference backends, every format,
          every rounding (GPU: one rounding per format, cycling: each kernel compiled once);
  moe     MXGroupedExperts (triton and reference backends), T in {1, 16, 128, 1024} tokens.
Inputs hold zero, subnormal, NaN and Inf blocks. Prints a table (and, with --out, JSON with
the environment); exit 1 if any case differs, raises, or is left out by --max-seconds.

On a CPU (`--device cpu`, tiny shapes) Triton kernels run in its interpreter: TRITON_INTERPRET=1
is set here before kernels.triton is imported. The interpreter keeps global state per launch
(it is not thread-safe), so interpreted launches are serialized with a lock there; the host
code around them (preparation, caches) still runs concurrently. On a GPU nothing is serialized.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform as pyplatform
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without an install

_INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16,
             torch.float64: torch.int64}
GPU_LINEAR = ((1, 4096, 4096), (16, 4096, 4096), (128, 2048, 2048), (1024, 1024, 1024))
CPU_LINEAR = ((1, 48, 256), (5, 48, 128), (20, 32, 128))  # decode, decode (dot), tiled
GPU_MOE = dict(tokens=(1, 16, 128, 1024), experts=8, top_k=2, n=1024, k=1024)
CPU_MOE = dict(tokens=(3, 17), experts=4, top_k=2, n=32, k=64)
DECODE_SCHEMES = ("w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp6_e3m2_a_fp8", "w_mxint8_a_mxint8")
MOE_SCHEMES = ("w_mxfp4_a_mxfp4", "w_mxfp6_e3m2_a_fp8", "w_mxfp8_e4m3", "w_mxint8_a_mxint8")
QUICK_SCHEMES = ("w_mxfp4_a_mxfp4", "w_mxfp8_e4m3_a_mxfp8_e4m3", "w_mxfp6_e3m2_a_fp8")


# --- comparing bits ------------------------------------------------------------------------------

def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits as integers (NaN payloads and signed zeros included)."""
    view = _INT_VIEW.get(t.dtype)
    return t.view(view) if view is not None else t


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical: same dtype, shape and bytes (a NaN equals the same NaN)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def max_ulp(a: torch.Tensor, b: torch.Tensor) -> Optional[int]:
    """The largest distance in units in the last place between matching floats (None: integer
    tensors or other shapes; a NaN against a number counts as the whole range)."""
    if a.dtype != b.dtype or a.shape != b.shape or a.dtype not in _INT_VIEW:
        return None

    def ordered(t: torch.Tensor) -> torch.Tensor:  # monotone map of float bits to integers
        i = bits(t).to(torch.int64)
        top = 1 << (8 * t.element_size() - 1)
        return torch.where(i < 0, -(i + top), i)

    diff = (ordered(a) - ordered(b)).abs()
    a_nan, b_nan = a.isnan(), b.isnan()
    whole = torch.full_like(diff, 1 << (8 * a.element_size()))
    # NaN vs a number: the whole range; NaN vs NaN: 0 for the same payload, else 1
    payload = (bits(a) != bits(b)).to(torch.int64)
    diff = torch.where(a_nan ^ b_nan, whole, torch.where(a_nan & b_nan, payload, diff))
    return int(diff.max()) if diff.numel() else 0


def compare(first: Sequence[torch.Tensor], other: Sequence[torch.Tensor]) -> Optional[int]:
    """None when every tensor is bit-identical, else the max ulp difference (-1: not floats)."""
    if len(first) != len(other):
        return -1
    worst = None
    for a, b in zip(first, other):
        if not same_bits(a, b):
            ulp = max_ulp(a, b)
            worst = max(worst or 0, -1 if ulp is None else ulp)
    return worst


@contextlib.contextmanager
def serialize_interpreter() -> Iterator[None]:
    """Under TRITON_INTERPRET=1, one interpreted Triton launch at a time (the interpreter
    patches triton.language and keeps the grid position in one global builder); no-op else."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    from triton.runtime import interpreter

    real = interpreter.GridExecutor.__call__
    lock = threading.Lock()

    def serialized(self, *args, **kwargs):
        with lock:
            return real(self, *args, **kwargs)

    interpreter.GridExecutor.__call__ = serialized
    try:
        yield
    finally:
        interpreter.GridExecutor.__call__ = real


# --- one case ------------------------------------------------------------------------------------

Outputs = tuple  # of tensors


@dataclass
class Row:
    section: str
    kernel: str  # kernel, or codec op / backend, or MoE backend
    scheme: str  # scheme, or format / rounding
    shape: str
    repeats: int
    threads: int
    identical: Optional[bool]  # None: not run
    max_ulp: Optional[int] = None  # when not identical (-1: integer outputs differ)
    note: str = ""
    seconds: float = 0.0


def run_case(call: Callable[[], Outputs], fresh: Callable[[], Outputs], repeats: int,
             threads: int, sync: Callable[[], None]) -> tuple[bool, Optional[int], str]:
    """(identical, max ulp, where it differed): repeats on one prepared state, one fresh
    state, then `threads` threads (started together) each calling `call` twice."""
    first = tuple(t.clone() for t in call())
    worst, where = None, []

    def note(what: str, ulp: Optional[int]) -> None:
        nonlocal worst
        if ulp is not None:
            worst = max(worst or 0, ulp)
            where.append(what)

    for i in range(1, repeats):
        note(f"repeat {i}", compare(first, call()))
    note("fresh prepared weight + kernel instance", compare(first, fresh()))
    if threads > 1:
        barrier = threading.Barrier(threads)

        def worker(_: int) -> list[Outputs]:
            barrier.wait()
            outs = [tuple(t.clone() for t in call()) for _ in range(2)]
            sync()
            return outs

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(worker, range(threads)))
        for i, outs in enumerate(results):
            for out in outs:
                note(f"thread {i}", compare(first, out))
    return worst is None, worst, ", ".join(dict.fromkeys(where))


# --- inputs --------------------------------------------------------------------------------------

def special_blocks(t: torch.Tensor, row: int, nan: bool) -> torch.Tensor:
    """Zero, subnormal (fp32 ~1e-40) and, with `nan`, NaN and Inf 32-blocks in one row."""
    t = t.clone()
    k = t.shape[-1]
    spots = [("zero", 0.0), ("sub", 1e-40)] + ([("nan", float("nan")), ("inf", float("inf"))]
                                               if nan else [])
    for i, (_, value) in enumerate(spots):
        lo = (32 * i) % k
        if value == 1e-40:
            t[row, lo:lo + 32] = torch.linspace(-1e-40, 1e-40, 32)
        else:
            t[row, lo:lo + 32] = 0.0
            t[row, lo + 5] = value
    return t


def _gen(*parts: object) -> torch.Generator:
    import zlib

    return torch.Generator().manual_seed(zlib.crc32(" ".join(map(str, parts)).encode()))


def linear_inputs(m: int, n: int, k: int, device: str, seed: object):
    """x [M, K] bf16 (specials in row 0; NaN / Inf only when M > 1), w [N, K] fp32 (specials,
    NaN / Inf in row 0), bias [N] bf16."""
    g = _gen(seed, m, n, k)
    w = special_blocks(torch.randn(n, k, generator=g) * 0.05, 0, nan=True)
    x = special_blocks(torch.randn(m, k, generator=g), 0, nan=m > 1)
    b = torch.randn(n, generator=g)
    return (w.to(device), x.to(device=device, dtype=torch.bfloat16),
            b.to(device=device, dtype=torch.bfloat16))


def static_scale(scheme, x: torch.Tensor) -> Optional[torch.Tensor]:
    """A per-tensor fp8 scale for a static activation key (some values saturate), else None."""
    key = scheme.activation
    if key is None or not key.static:
        return None
    finite = x.float().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    return (finite.abs().amax().clamp_min(1e-3) / 448.0 * 0.7).reshape(()).cpu()


# --- the sections: each yields (row, build); build() -> (call, fresh) ----------------------------

@dataclass
class Plan:
    device: str
    repeats: int
    threads: int
    schemes: list  # registry Schemes
    quick: bool

    @property
    def gpu(self) -> bool:
        return self.device != "cpu"

    def sync(self) -> None:
        if self.gpu:
            torch.cuda.synchronize()

    def pick(self, names: Sequence[str]) -> list:
        by_name = {s.name: s for s in self.schemes}
        return [by_name[n] for n in names if n in by_name]


def _twice(make: Callable[[], Callable[[], Outputs]]):
    """(call, fresh): `call` on one prepared state; `fresh` builds a new one per call."""
    return make(), (lambda: make()())


def linear_cases(plan: Plan) -> Iterator[tuple[Row, Callable]]:
    from kernels.base import load_kernel
    from kernels.kernel_table import kernel_by_name
    from registry.platform import detect
    from registry.probe import runnable_here
    from registry.resolve import accepts

    plat = detect()
    shapes = GPU_LINEAR if plan.gpu else CPU_LINEAR
    for name in runnable_here(plat):
        decl = kernel_by_name(name)
        for scheme in plan.schemes:
            if not accepts(decl, scheme.contract, plat)[0]:
                continue
            for m, n, k in (shapes[:2] if plan.quick else shapes):
                row = Row("linear", name, scheme.name, f"{m}x{n}x{k}", plan.repeats,
                          plan.threads, None)
                ok, why = decl.check_limits(k, n, torch.bfloat16)
                if not ok:
                    row.note = f"not run: {why}"
                    yield row, None
                    continue

                def build(name=name, scheme=scheme, m=m, n=n, k=k):
                    w, x, b = linear_inputs(m, n, k, plan.device, (name, scheme.name))
                    scale = static_scale(scheme, x)

                    def make():
                        kernel = load_kernel(name)
                        prepared = kernel.prepare(w, scheme.contract, act_scale=scale)
                        return lambda: (kernel.apply(x, prepared, b),)
                    return _twice(make)

                yield row, build


def decode_cases(plan: Plan) -> Iterator[tuple[Row, Callable]]:
    """The decode configs the default tuning picks (linear_decode.default_config), forced at
    each M it picks them for (mxfp4: up to 64 rows), plus the tiled strategy at M > 16."""
    from kernels.base import load_kernel
    from kernels.formats import FORMATS
    from kernels.triton import linear_decode
    from kernels.triton.linear_emulation import fused_linear

    names = {id(c): n for n, c in vars(linear_decode).items()
             if isinstance(c, linear_decode.DecodeConfig)}
    n, k = (2048, 4096) if plan.gpu else (32, 512)
    runs = []
    for scheme in plan.pick(DECODE_SCHEMES):
        bits = FORMATS[scheme.contract.weight.format].bits
        for m in (1, 4, 16, 64):
            if m <= linear_decode.decode_max_m(bits):
                for interpreted in ((False,) if plan.gpu else (False, True)):
                    cfg = linear_decode.default_config(m, bits, interpreted)
                    runs.append((scheme, names.get(id(cfg), "interpreter default"), cfg, m))
        runs.append((scheme, "tiled", None, 128 if plan.gpu else 20))
    if plan.quick:
        runs = runs[:2] + runs[-1:]
    for scheme, label, cfg, m in runs:
        row = Row("decode" if cfg else "tiled", "triton-emulation", scheme.name,
                  f"{m}x{n}x{k}", plan.repeats, plan.threads, None, note=label)

        def build(scheme=scheme, label=label, cfg=cfg, m=m):
            w, x, b = linear_inputs(m, n, k, plan.device, ("decode", label, scheme.name))
            if cfg is None:  # tiled: the default of fp16 activations at M > 16
                x, b = x.to(torch.float16), b.to(torch.float16)
            scale = static_scale(scheme, x)
            strategy = "decode" if cfg else "tiled"

            def make():
                prepared = load_kernel("triton-emulation").prepare(w, scheme.contract,
                                                                   act_scale=scale)
                return lambda: (fused_linear(x, prepared, b, strategy=strategy, config=cfg),)
            return _twice(make)

        yield row, build


def codec_cases(plan: Plan) -> Iterator[tuple[Row, Callable]]:
    from kernels.formats import FORMATS, LAYOUTS, ROUNDINGS
    from kernels.mx import mx_dequantize, mx_qdq, mx_quantize

    r, k = (1024, 4096) if plan.gpu else (16, 256)
    formats = list(FORMATS)[:2] if plan.quick else list(FORMATS)

    def data(fmt: str) -> torch.Tensor:
        x = special_blocks(torch.randn(r, k, generator=_gen("codec", fmt)) * 3, 1, nan=True)
        return x.to(device=plan.device, dtype=torch.bfloat16)

    for backend in ("triton", "reference"):
        for i, fmt in enumerate(formats):
            # GPU / --quick: one rounding per format, cycling (each kernel compiled once:
            # compilation dominates a GPU run); CPU: every pair
            cycle = plan.gpu or plan.quick
            for rounding in ((ROUNDINGS[i % len(ROUNDINGS)],) if cycle else ROUNDINGS):
                def quant(fmt=fmt, rounding=rounding, backend=backend):
                    x = data(fmt)

                    def call():
                        q = mx_quantize(x, fmt, rounding=rounding, backend=backend)
                        return (q.data, q.scales)
                    return call, call

                def qdq(fmt=fmt, rounding=rounding, backend=backend):
                    x = data(fmt)
                    def call():
                        return (mx_qdq(x, fmt, rounding=rounding, backend=backend),)
                    return call, call

                for op, build in (("mx_quantize", quant), ("mx_qdq", qdq)):
                    yield (Row("codec", f"{op}/{backend}", f"{fmt}/{rounding}", f"{r}x{k}",
                               plan.repeats, plan.threads, None), build)
            for layout in LAYOUTS:
                if FORMATS[fmt].bits == 8 and layout == "packed":
                    continue

                def deq(fmt=fmt, layout=layout, backend=backend):
                    q = mx_quantize(data(fmt), fmt, rounding="even", backend="reference",
                                    layout=layout)
                    def call():
                        return (mx_dequantize(q, torch.bfloat16, backend=backend),)
                    return call, call

                yield (Row("codec", f"mx_dequantize/{backend}", f"{fmt}/{layout}", f"{r}x{k}",
                           plan.repeats, plan.threads, None), deq)


def moe_cases(plan: Plan) -> Iterator[tuple[Row, Callable]]:
    from kernels.moe import MXGroupedExperts

    shape = GPU_MOE if plan.gpu else CPU_MOE
    e, top_k, n, k = shape["experts"], shape["top_k"], shape["n"], shape["k"]
    tokens = shape["tokens"][:1] if plan.quick else shape["tokens"]
    for backend in ("triton", "reference"):
        for scheme in plan.pick(MOE_SCHEMES):
            for t in tokens:
                def build(scheme=scheme, t=t, backend=backend):
                    g = _gen("moe", scheme.name, t)
                    w = (torch.randn(e, n, k, generator=g) * 0.05).to(plan.device)
                    x = special_blocks(torch.randn(t, k, generator=g), 0, nan=t > 1)
                    x = x.to(device=plan.device, dtype=torch.bfloat16)
                    logits = torch.randn(t, e, generator=g).to(plan.device)
                    scale = static_scale(scheme, x)

                    def make():
                        layer = MXGroupedExperts(w, scheme, backend=backend, act_scale=scale)
                        return lambda: (layer(x, logits, top_k),)
                    return _twice(make)

                yield (Row("moe", f"MXGroupedExperts/{backend}", scheme.name,
                           f"T{t} E{e} top{top_k} {n}x{k}", plan.repeats, plan.threads, None),
                       build)


SECTIONS = {"linear": linear_cases, "decode": decode_cases, "codec": codec_cases,
            "moe": moe_cases}


def all_cases(plan: Plan, sections: Sequence[str]) -> Iterator[tuple[Row, Callable]]:
    for section in sections:
        yield from SECTIONS[section](plan)


def run_checks(plan: Plan, sections: Sequence[str], max_seconds: float,
               progress: Callable[[Row], None] = lambda row: None) -> list[Row]:
    """Every row of the chosen sections; a case that raises is a row that says so."""
    rows: list[Row] = []
    start = time.perf_counter()
    with serialize_interpreter(), torch.no_grad():
        for row, build in all_cases(plan, sections):
            t0 = time.perf_counter()
            if build is not None and t0 - start > max_seconds:
                row.note = f"not run: past --max-seconds {max_seconds:g}"
            elif build is not None:
                try:
                    call, fresh = build()
                    row.identical, row.max_ulp, where = run_case(
                        call, fresh, plan.repeats, plan.threads, plan.sync)
                    row.note = "; ".join(p for p in (row.note, where) if p)
                except Exception as e:  # noqa: BLE001 - a raising kernel is a failed row
                    row.identical = False
                    row.note = f"raised {type(e).__name__}: {_line(e)}"
            row.seconds = time.perf_counter() - t0
            rows.append(row)
            progress(row)
    return rows


def warm_shard(plan: Plan, sections: Sequence[str], shard: int, shards: int) -> int:
    """Run every `shards`-th case once (compiles its kernels into Triton's on-disk cache, so
    the checking process loads them instead of compiling them one after another)."""
    done = 0
    with torch.no_grad():
        for i, (_, build) in enumerate(all_cases(plan, sections)):
            if build is not None and i % shards == shard:
                try:
                    build()[0]()
                    done += 1
                except Exception:  # noqa: BLE001 - the checking run reports it
                    pass
    plan.sync()
    return done


def _line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


def failed(rows: Sequence[Row]) -> list[Row]:
    """Rows that differ, raised, or were not run (nothing is left out silently)."""
    return [r for r in rows if r.identical is not True]


# --- report --------------------------------------------------------------------------------------

def environment(device: str, command: str) -> dict:
    import triton

    env = {"device": "cpu (Triton interpreter)" if device == "cpu" else None,
           "capability": None, "sm_count": None, "torch": torch.__version__,
           "triton": triton.__version__, "cuda": torch.version.cuda, "driver": None,
           "python": pyplatform.python_version(), "cpu_threads": torch.get_num_threads(),
           "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "command": command}
    if device != "cpu":
        props = torch.cuda.get_device_properties(0)
        env.update(device=props.name, sm_count=props.multi_processor_count,
                   capability=".".join(map(str, torch.cuda.get_device_capability(0))))
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            pass
    return env


def markdown(rows: Sequence[Row], env: dict) -> str:
    lines = [f"# determinism on {env['device']}: torch {env['torch']}, triton {env['triton']}, "
             f"CUDA {env['cuda']}, driver {env['driver']}, {env['date']}", "",
             "| section | kernel / op | scheme / format | shape | repeats | threads | identical "
             "| max ulp diff | s | note |", "|---|---|---|---|---:|---:|---|---:|---:|---|"]
    for r in rows:
        same = {True: "yes", False: "NO", None: "not run"}[r.identical]
        ulp = "" if r.max_ulp is None else str(r.max_ulp)
        lines.append(f"| {r.section} | {r.kernel} | {r.scheme} | {r.shape} | {r.repeats} | "
                     f"{r.threads} | {same} | {ulp} | {r.seconds:.2f} | {r.note} |")
    bad = failed(rows)
    lines.append(f"\n{len(rows) - len(bad)} of {len(rows)} cases bit-identical"
                 + ("" if not bad else f"; {len(bad)} NOT (see the rows marked NO / not run)"))
    return "\n".join(lines)


def warm_up(device: str, sections: Sequence[str], schemes: Sequence[str], quick: bool,
            jobs: int, limit_s: float) -> float:
    """Compile in `jobs` processes at once (each runs every jobs-th case once); seconds taken."""
    t0 = time.perf_counter()
    base = [sys.executable, str(Path(__file__).resolve()), "--device", device,
            "--sections", ",".join(sections), "--schemes", ",".join(schemes)]
    procs = [subprocess.Popen(base + (["--quick"] if quick else []) +
                              [f"--warm-shard={i}/{jobs}"]) for i in range(jobs)]
    for p in procs:
        try:
            p.wait(timeout=max(1.0, limit_s - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()  # only our own child; the checking run reports what is still missing
            p.wait()
    print(f"warm-up: {jobs} processes, {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None,
                    help="default: cuda when there is a GPU, else cpu (Triton interpreter)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated subset of {', '.join(SECTIONS)}")
    ap.add_argument("--schemes", default=None, help="comma-separated scheme names (default all)")
    ap.add_argument("--quick", action="store_true", help="a few schemes, shapes and formats")
    ap.add_argument("--max-seconds", type=float, default=170.0,
                    help="cases past this wall time are reported as not run (exit 1)")
    ap.add_argument("--out", type=Path, default=None, help="write the rows + environment as JSON")
    ap.add_argument("--jobs", type=int, default=None,
                    help="processes that first compile the kernels in parallel into Triton's "
                         "cache (default: 8 on a GPU, 0 on a CPU)")
    ap.add_argument("--warm-shard", default=None, help=argparse.SUPPRESS)  # "i/n": internal
    args = ap.parse_args(argv)
    started = time.perf_counter()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no GPU here; use --device cpu")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
        if "kernels.triton.mx_quant" in sys.modules and \
                os.environ["TRITON_INTERPRET"] != "1":
            ap.error("--device cpu needs TRITON_INTERPRET=1 before kernels.triton is imported")
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown --sections {', '.join(unknown)}; valid: {', '.join(SECTIONS)}")
    if args.repeats < 2 or args.threads < 1:
        ap.error(f"--repeats {args.repeats} / --threads {args.threads}: need repeats >= 2 and "
                 "threads >= 1")
    from registry.catalog import load_schemes

    catalog = load_schemes()
    if args.schemes:
        names = [n.strip() for n in args.schemes.split(",") if n.strip()]
    elif args.quick:  # each section still gets its representatives
        names = list(QUICK_SCHEMES)
    else:
        names = sorted(catalog.schemes)
    try:
        schemes = [catalog.get(n) for n in dict.fromkeys(names)]
    except KeyError as e:
        ap.error(str(e))
    plan = Plan(device, args.repeats, args.threads, schemes, args.quick)
    if args.warm_shard:
        shard, shards = map(int, args.warm_shard.split("/"))
        print(f"warm shard {shard}/{shards}: {warm_shard(plan, sections, shard, shards)} cases",
              file=sys.stderr)
        return 0
    jobs = args.jobs if args.jobs is not None else (8 if plan.gpu else 0)
    warm_s = warm_up(device, sections, [s.name for s in schemes], args.quick, jobs,
                     0.6 * args.max_seconds) if jobs > 1 else 0.0  # the rest: the checks
    command = " ".join(["tools/check_determinism.py", *(argv if argv is not None
                                                         else sys.argv[1:])])

    def progress(row: Row) -> None:
        print(f"[{row.section}] {row.kernel} {row.scheme} {row.shape}: "
              f"{ {True: 'same', False: 'DIFFERS', None: 'not run'}[row.identical]} "
              f"({row.seconds:.1f}s)", file=sys.stderr, flush=True)

    rows = run_checks(plan, sections, args.max_seconds - (time.perf_counter() - started),
                      progress)
    env = environment(device, command)
    env.update(warm_up_s=round(warm_s, 1), warm_up_jobs=jobs if jobs > 1 else 0,
               total_s=round(time.perf_counter() - started, 1))
    print(markdown(rows, env))
    if args.out:
        args.out.write_text(json.dumps({"environment": env, "rows": [asdict(r) for r in rows],
                                        "failed": len(failed(rows))}, indent=1) + "\n")
    return 1 if failed(rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
