"""The linear-kernel benchmark behind `registry bench` (and tools/bench_linear.py).

For each scheme x shape (N x K) x kernel x M: prepare the weight once, check the kernel's
output against `reference-emulation` on its first rows (a wrong kernel is marked FAIL and never
timed), then time it three ways, next to bf16 `F.linear` on the same shape in the same run:
- graph: the call captured in a CUDA graph, replayed n times between two events (no launch
  cost: the kernel's own time), median of several repeats. The graph cycles through enough
  copies of the weight to exceed twice the L2 cache, so weights are read from HBM as in a model;
- eager: events around each single call, L2 flushed before each (`triton.testing.do_bench`'s
  rule: launch cost included), median. The flush keeps the GPU busy while the host launches
  the call, so host time up to the flush's length (~30 us on an H200) does not show;
- loop: calls back to back between two events, cycling the weight copies, no flush (an eager
  decode loop): where a call's host time exceeds its GPU time, this is the host time.
The rules live in registry/machine/timing.py, the one timing rule of every benchmark script.
The D2D copy bandwidth of a 1 GiB buffer is measured once per run for the "% copy BW" column.

`run_bench(device="cpu")` works for tests (tiny shapes; Triton kernels in the interpreter):
times are then `time.perf_counter` medians and graph timing is reported as unavailable. The CLI
refuses to run without a GPU. Importing this module does not import torch.
"""
from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

from kernels.spec.platform import Platform, driver_version
from registry.files.catalog import Catalog
from registry.machine.bench_rows import (  # noqa: F401  (ERR_TOL: the bound the tests read)
    ERR_TOL, fill_ratio, judge, mark_raised,
)
from registry.machine.timing import (  # noqa: F401  (median_ms / graph_ms: the scripts' one rule)
    _copies_needed, _is_cuda, copy_bandwidth, graph_ms, loop_ms, median_ms,
)

#: The issue's grid: N x K of Llama-3-70B-like projections, and batch sizes M.
DEFAULT_SHAPES: tuple[tuple[int, int], ...] = ((8192, 8192), (28672, 8192), (8192, 28672))
DEFAULT_MS: tuple[int, ...] = (1, 16, 128, 1024, 4096)
CHECK_ROWS = 8  # rows of x checked against the reference (rows are independent)
WEIGHT_STD = 0.02


@dataclass(frozen=True)
class TimingConfig:
    warmup_ms: float = 25.0  # eager warm-up budget (CUDA)
    rep_ms: float = 100.0  # eager and graph measurement budget each (CUDA)
    graph_repeats: int = 7  # graph: median over this many runs of n replays
    cpu_calls: int = 3  # CPU: median of this many calls after one warm-up


@dataclass(frozen=True)
class Task:
    scheme: str
    kernel: str
    n: int
    k: int
    ms: tuple[int, ...]
    forced: bool


@dataclass(frozen=True)
class Skip:
    scheme: str
    kernel: str
    shape: str  # "NxK"
    reason: str


def plan_bench(catalog: Catalog, schemes: Sequence[str] | None,
               shapes: Sequence[tuple[int, int]], ms: Sequence[int],
               kernels: Sequence[str] | None, platform: Platform) -> tuple[list[Task], list[Skip]]:
    """What runs: per scheme x shape, the resolved kernel (kernels=None) or each forced kernel
    that runs here, accepts the contract and fits the shape; everything else as a Skip."""
    from kernels.select.kernel_table import kernel_by_name, kernel_decls
    from registry.machine.probe import runnable_here
    from kernels.select.resolve import ResolutionError, accepts, resolve

    known = [d.name for d in kernel_decls()]
    for name in kernels or ():
        if name not in known:
            raise ValueError(f"unknown kernel {name!r}; known kernels: {', '.join(known)}")
    picked = [catalog.get(s) for s in schemes] if schemes else \
        sorted(catalog.schemes.values(), key=lambda s: s.name)
    picked = list({s.name: s for s in picked}.values())  # a name and its alias: once
    here = runnable_here(platform)
    tasks, skips = [], []
    for s in picked:
        for n, k in shapes:
            where = f"{n}x{k}"
            if kernels is None:
                try:
                    res = resolve(s, platform, shape=(n, k), act_dtype="bfloat16")
                except ResolutionError as e:
                    skips.append(Skip(s.name, "-", where, str(e)))
                    continue
                tasks.append(Task(s.name, res.kernel, n, k, tuple(ms), False))
                continue
            for name in kernels:
                decl = kernel_by_name(name)
                ok, why = (True, "")
                if name not in here:
                    ok, why = False, (f"does not run on {platform} (runs on "
                                      f"{', '.join(decl.platforms)})")
                if ok:
                    ok, why = accepts(decl, s.contract, platform)
                if ok:
                    ok, why = decl.check_limits(k, n, "bfloat16")
                if ok:
                    tasks.append(Task(s.name, name, n, k, tuple(ms), True))
                else:
                    skips.append(Skip(s.name, name, where, why))
    return tasks, skips


def check_grid(shapes: Sequence[tuple[int, int]], ms: Sequence[int],
               kernels: Sequence[str] | None) -> None:
    """ValueError naming the bad value: shapes (N, K) positive ints with K % 32 == 0, M positive
    ints, nothing twice, kernels None (the resolved kernel) or a non-empty list of names."""
    def is_int(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if not shapes:
        raise ValueError("shapes is empty; give (N, K) pairs, e.g. [(8192, 8192)]")
    for shape in shapes:
        if not (isinstance(shape, (tuple, list)) and len(shape) == 2):
            raise ValueError(f"shape {shape!r} is not an (N, K) pair")
        n, k = shape
        if not (is_int(n) and is_int(k) and n > 0 and k > 0 and k % 32 == 0):
            raise ValueError(f"shape {n}x{k}: N and K must be positive ints, K a multiple of 32")
    if len(set(map(tuple, shapes))) != len(shapes):
        raise ValueError(f"shapes {list(shapes)!r}: a shape is given twice")
    if not ms or any(not is_int(m) or m <= 0 for m in ms):
        raise ValueError(f"ms {list(ms)!r}: give positive ints (the activation rows M)")
    if len(set(ms)) != len(ms):
        raise ValueError(f"ms {list(ms)!r}: an M is given twice")
    if kernels is not None and (isinstance(kernels, str) or not kernels
                                or not all(isinstance(k, str) for k in kernels)):
        raise ValueError(f"kernels {kernels!r}: give None (the kernel resolve picks) or a "
                         "non-empty list of kernel names")


# --- the run ---------------------------------------------------------------------------------

@dataclass
class BenchRow:
    scheme: str
    kernel: str
    m: int
    n: int
    k: int
    status: str  # "ok" | "FAIL" (output differs from the reference) | "ERROR" (raised)
    forced: bool  # --kernels named it (False: the kernel `resolve` picks here)
    err: Optional[float] = None  # max over checked rows of ‖out − ref‖ / ‖ref‖
    graph_us: Optional[float] = None
    eager_us: Optional[float] = None
    bf16_graph_us: Optional[float] = None
    bf16_eager_us: Optional[float] = None
    ratio: Optional[float] = None  # bf16 time / kernel time (graph; eager when no graph): >1 faster
    ratio_eager: Optional[float] = None
    loop_us: Optional[float] = None  # a call among back-to-back calls (timing.loop_ms)
    bf16_loop_us: Optional[float] = None
    ratio_loop: Optional[float] = None
    tflops: Optional[float] = None  # 2MNK / time (the time `ratio` uses)
    tb_s: Optional[float] = None  # (weight codes + scales + x + out) bytes / time
    pct_copy: Optional[float] = None  # tb_s as % of the run's D2D copy bandwidth
    bytes: Optional[int] = None
    route: Optional[str] = None  # how the kernel ran this M (its `route`: strategy, config)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BenchResult:
    rows: list[BenchRow]
    skipped: list[Skip]
    environment: dict

    @property
    def failed(self) -> list[BenchRow]:
        return [r for r in self.rows if r.status != "ok"]

    def to_dict(self) -> dict:
        return {"environment": self.environment, "rows": [r.to_dict() for r in self.rows],
                "skipped": [asdict(s) for s in self.skipped]}


Progress = Callable[[str, int, int, object], None]  # (event "start"|"row", index, total, item)


def run_bench(schemes: Sequence[str] | None = None,
              shapes: Sequence[tuple[int, int]] = DEFAULT_SHAPES,
              ms: Sequence[int] = DEFAULT_MS, kernels: Sequence[str] | None = None, *,
              device: str = "cuda", catalog: Catalog | None = None, seed: int = 0,
              timing: TimingConfig = TimingConfig(), progress: Progress | None = None,
              command: str | None = None, copy_bytes: int | None = None) -> BenchResult:
    """Check and time every planned (scheme, shape, kernel, M); see the module docstring.

    `device="cpu"` is for tests only (perf_counter times, no graphs); the CLI refuses it.
    """
    import torch

    from registry.files.catalog import load_schemes
    from kernels.spec.platform import detect

    check_grid(shapes, ms, kernels)
    if _is_cuda(device) and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but torch.cuda.is_available() is False; run on a "
                         "GPU machine (device='cpu' checks the logic only)")
    catalog = catalog or load_schemes()
    plat = detect() if _is_cuda(device) else Platform("cpu")
    tasks, skips = plan_bench(catalog, schemes, shapes, ms, kernels, plat)
    copy_tbs = copy_bandwidth(device, copy_bytes or ((1 << 30) if _is_cuda(device) else 1 << 24))
    env = environment(device, plat, copy_tbs, command)
    total = sum(len(t.ms) for t in tasks)
    rows: list[BenchRow] = []
    baselines: dict[tuple[int, int, int], tuple] = {}
    with torch.no_grad():
        for t in tasks:
            rows += _run_task(catalog, t, device, seed, timing, copy_tbs, baselines,
                              progress or (lambda *a: None), len(rows), total)
    return BenchResult(rows, skips, env)


def task_weight(n: int, k: int, seed: int, device):
    """(generator, bf16 N x K weight): the weight every kernel of an (N, K) task is prepared
    from; the generator then draws the task's inputs. tools/bench_peer.py draws the same one."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed + 7919 * n + k)
    return gen, (torch.randn(n, k, generator=gen, device=device) * WEIGHT_STD).to(torch.bfloat16)


def _run_task(catalog, t: Task, device, seed, timing, copy_tbs, baselines, progress,
              done: int, total: int) -> list[BenchRow]:
    import torch
    import torch.nn.functional as F

    from kernels.base import load_kernel

    scheme = catalog.get(t.scheme)
    gen, w = task_weight(t.n, t.k, seed, device)
    static = scheme.activation is not None and scheme.activation.static
    calibration = torch.randn(16, t.k, generator=gen, device=device).to(torch.bfloat16)
    rows = []
    try:
        kernel, ref = load_kernel(t.kernel), load_kernel("reference-emulation")
        copies = [kernel.prepare(w, scheme.contract, calibration=calibration if static else None)]
    except Exception as e:  # noqa: BLE001 - reported in the rows, never dropped
        for i, m in enumerate(t.ms):
            row = BenchRow(t.scheme, t.kernel, m, t.n, t.k, "ERROR", t.forced,
                           notes=[f"prepare raised {type(e).__name__}: {e}".replace("\n", " ")])
            progress("row", done + i, total, row)
            rows.append(row)
        return rows
    weight_bytes = copies[0].weight.nbytes
    scale = {"act_scale": copies[0].act_scale} if static else {}
    copies += [kernel.prepare(w, scheme.contract, **scale)
               for _ in range(_copies_needed(weight_bytes, device) - 1)]
    for i, m in enumerate(t.ms):
        progress("start", done + i, total, (t, m))
        x = torch.randn(m, t.k, generator=gen, device=device).to(torch.bfloat16)
        row = BenchRow(t.scheme, t.kernel, m, t.n, t.k, "ok", t.forced,
                       bytes=weight_bytes + 2 * m * t.k + 2 * m * t.n)
        step = "check"
        try:
            _check(row, kernel, ref, x, copies[0], scheme.contract)
            route = getattr(kernel, "route", None)  # (a plugin's kernel may have none)
            row.route = route(x, copies[0]) if route is not None else None
            if row.status == "ok":  # a wrong kernel is never timed
                step = "timing"
                if (t.n, t.k, m) not in baselines:
                    weights = [w] + [w.clone() for _ in range(
                        _copies_needed(w.numel() * 2, device) - 1)]
                    baselines[(t.n, t.k, m)] = (
                        _time_both(weights, lambda wt, x=x: F.linear(x, wt), device, timing),
                        _time_loop(weights, lambda wt, x=x: F.linear(x, wt), device, timing))
                    del weights
                base, bf16_loop = baselines[(t.n, t.k, m)]
                time_row(row, copies, lambda p, x=x: kernel.apply(x, p), device, timing, base,
                         bf16_loop, copy_tbs)
        except Exception as e:  # noqa: BLE001 - reported in the row, never dropped
            mark_raised(row, step, e)
        progress("row", done + i, total, row)
        rows.append(row)
    del copies
    if _is_cuda(device):
        torch.cuda.empty_cache()
    return rows


def _check(row: BenchRow, kernel, ref, x, prepared, contract) -> None:
    """Compare the kernel's output on the full x (its real M path) with the reference on the
    first rows; rows are independent unless the activation scale is dynamic per tensor."""
    act = contract.activation
    rows = x.shape[0] if (act is not None and not act.static
                          and act.scale.granularity == "tensor") else min(CHECK_ROWS, x.shape[0])
    judge(row, kernel.apply(x, prepared)[:rows], ref.apply(x[:rows], prepared),
          "reference-emulation", f"the first {rows} rows")


def _time_both(operands: list, call, device, timing: TimingConfig):
    """(graph ms or None, eager ms, note): the same two rules for kernels and the baseline."""
    eager = median_ms(lambda: call(operands[0]), device, timing.warmup_ms, timing.rep_ms,
                      cpu_calls=timing.cpu_calls)
    if not _is_cuda(device):  # said once, in environment()["graph_timing"]
        return None, eager, None

    def all_copies() -> None:
        for op in operands:
            call(op)
    try:
        graph = graph_ms(all_copies, device, timing.rep_ms, timing.graph_repeats) / len(operands)
        return graph, eager, None
    except Exception as e:  # noqa: BLE001 - reported in the row
        import torch

        torch.cuda.synchronize()
        return None, eager, f"graph capture failed: {type(e).__name__}: {e}".replace("\n", " ")


def _time_loop(operands: list, call, device, timing: TimingConfig) -> float:
    """ms of a call among back-to-back calls cycling the operands (timing.loop_ms)."""
    ops = itertools.cycle(operands)
    return loop_ms(lambda: call(next(ops)), device, cpu_calls=timing.cpu_calls)


def time_row(row: BenchRow, operands: list, call, device, timing: TimingConfig, base,
             bf16_loop: float, copy_tbs: float) -> None:
    """Time `call` over the weight copies `operands` (graph, eager, loop) and fill the row's
    figures against the bf16 baseline's (`base`: `_time_both`'s ms; `bf16_loop`: ms). One rule
    for our kernels and the peer's (tools/bench_peer.py)."""
    graph, eager, note = _time_both(operands, call, device, timing)
    row.graph_us = None if graph is None else graph * 1e3
    row.eager_us = eager * 1e3
    row.notes += [note] if note else []
    _fill_figures(row, base, copy_tbs)
    row.loop_us = _time_loop(operands, call, device, timing) * 1e3
    row.bf16_loop_us = bf16_loop * 1e3
    row.ratio_loop = row.bf16_loop_us / row.loop_us


def _fill_figures(row: BenchRow, base, copy_tbs: float) -> None:
    t_us = fill_ratio(row, base)
    row.ratio_eager = row.bf16_eager_us / row.eager_us
    row.tflops = 2 * row.m * row.n * row.k / (t_us * 1e-6) / 1e12
    row.tb_s = row.bytes / (t_us * 1e-6) / 1e12
    row.pct_copy = 100 * row.tb_s / copy_tbs


# --- the environment -------------------------------------------------------------------------

def environment(device, plat: Platform, copy_tbs: float, command: str | None) -> dict:
    """Where and when the figures were measured: enough to compare two runs."""
    import platform as pyplatform

    import torch

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    env = {
        "device": "cpu", "capability": None, "platform": str(plat),
        "torch": torch.__version__, "triton": triton_version,
        "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
        "driver": None, "python": pyplatform.python_version(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "copy_tb_s": copy_tbs, "command": command, "check_tol": ERR_TOL,
        "graph_timing": ("CUDA-graph replay" if _is_cuda(device) else
                         "unavailable on a CPU (test run): times are perf_counter eager medians"),
    }
    if _is_cuda(device):
        props = torch.cuda.get_device_properties(torch.device(device))
        env["device"] = props.name
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        env["driver"] = driver_version()
    return env


