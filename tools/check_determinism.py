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

This module is the command line (arguments, compile warm-up, time cap, table / JSON, exit
code); the cases, inputs and bit comparison are in tools/determinism_cases.py.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform as pyplatform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without an install
if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path (tests): the sibling
    sys.path.append(str(Path(__file__).resolve().parent))  # last, so tools/ shadows nothing

# max_ulp, same_bits, special_blocks, static_scale: re-exported (the tests and docs use them here)
from determinism_cases import (  # noqa: F401
    QUICK_SCHEMES,
    SECTIONS,
    Plan,
    Row,
    all_cases,
    max_ulp,
    run_case,
    same_bits,
    serialize_interpreter,
    special_blocks,
    static_scale,
)
from kernels.spec.platform import driver_version  # noqa: E402


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
        env["driver"] = driver_version()
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
    from registry.files.catalog import load_schemes

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
