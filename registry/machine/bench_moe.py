"""The MoE benchmark behind `registry bench --moe` (tools/bench_moe.py times forced configs).

Per scheme x MoE shape (E experts, top-k, an expert's N x K) x tokens T: the MoE layer
`registry resolve --kind moe` picks (`MXGroupedExperts`, backend "auto"), its output checked
against the reference backend first (a wrong layer is marked FAIL and never timed), then timed
next to the same tokens through bf16 experts (`bf16_grouped`: the logits routed the same way,
torch._grouped_mm), by registry.machine.bench's rules (CUDA-graph replay where the call
captures, and eager per call with L2 flushed). Both sides include the routing, since a layer's
forward does. Why in the registry and not only in tools/: a pip install has no tools/, and
issue 16's targets are ratios to bf16 `_grouped_mm` with the same routing.

The experts' weights are not cycled through copies (unlike the linear benchmark): an MoE
layer's experts are read once per call by both sides alike. `run_moe_bench(device="cpu")` is
for tests (tiny shapes; Triton kernels in the interpreter). Importing this module does not
import torch.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict, dataclass, field
from typing import Iterator, Optional, Sequence

from registry.files.catalog import Catalog
from registry.machine.bench import (
    WEIGHT_STD, Progress, Skip, TimingConfig, _is_cuda, _time_both, copy_bandwidth, environment,
)
from registry.machine.bench_rows import fill_ratio, judge, mark_raised


@dataclass(frozen=True)
class MoeShape:
    experts: int
    top_k: int
    n: int  # an expert's output features
    k: int  # ... and input features (the tokens' hidden size)

    def __str__(self) -> str:
        return f"{self.experts}:{self.top_k}:{self.n}x{self.k}"


#: issue 16's three shapes: E = 8 top-2 2048^2; gpt-oss-20b-like E = 32 top-4 2880^2;
#: DeepSeek-like E = 64 top-6, hidden 7168 -> intermediate 2048
DEFAULT_MOE_SHAPES: tuple[MoeShape, ...] = (MoeShape(8, 2, 2048, 2048), MoeShape(32, 4, 2880, 2880),
                                            MoeShape(64, 6, 2048, 7168))
DEFAULT_TOKENS: tuple[int, ...] = (1, 16, 256, 2048)
SPEC = "E:TOPK:NxK"


def parse_moe_shapes(text: str) -> list[MoeShape]:
    """'8:2:2048x2048,32:4:2880x2880' -> MoeShapes; a bad item: ValueError naming it and the
    form (experts >= 1, 1 <= top-k <= experts, N and K >= 1, K a multiple of 32, no repeats)."""
    shapes: list[MoeShape] = []
    for item in (i.strip() for i in text.split(",")):
        parts = item.split(":")
        fields = parts[:2] + parts[2].lower().split("x") if len(parts) == 3 else []
        if len(fields) != 4 or not all(f.isascii() and f.isdigit() for f in fields):
            hint = "" if ":" in item else "; scheme names go before --moe (registry bench " \
                "SCHEME ... --moe [SHAPES])"
            raise ValueError(f"--moe: {item!r} is not {SPEC} (e.g. 8:2:2048x2048: 8 experts, "
                             f"top-2, each 2048 x 2048){hint}")
        shape = MoeShape(*(int(f) for f in fields))
        if shape.experts < 1 or not 1 <= shape.top_k <= shape.experts or shape.n < 1 \
                or shape.k < 1 or shape.k % 32:
            raise ValueError(f"--moe: {item!r}: give experts >= 1, 1 <= top-k <= experts, "
                             "N >= 1 and K a positive multiple of 32 (the MX block)")
        if shape in shapes:
            raise ValueError(f"--moe: {shape} is given twice; name each shape once")
        shapes.append(shape)
    return shapes


@dataclass
class MoeRow:
    scheme: str
    kernel: str  # the moe kernel resolve picked (and its qdq kernel: `qdq`)
    experts: int
    top_k: int
    n: int
    k: int
    tokens: int
    status: str  # "ok" | "FAIL" (differs from the reference backend) | "ERROR" (raised)
    qdq: Optional[str] = None
    err: Optional[float] = None  # max over tokens of ‖out − ref‖ / ‖ref‖
    graph_us: Optional[float] = None
    eager_us: Optional[float] = None
    bf16_graph_us: Optional[float] = None
    bf16_eager_us: Optional[float] = None
    ratio: Optional[float] = None  # bf16 time / layer time (graph where both have one, else eager)
    notes: list[str] = field(default_factory=list)


@dataclass
class MoeResult:
    rows: list[MoeRow]
    skipped: list[Skip]  # (scheme, "-", shape, why): no MoE kernel runs it here
    environment: dict

    @property
    def failed(self) -> list[MoeRow]:
        return [r for r in self.rows if r.status != "ok"]

    def to_dict(self) -> dict:
        return {"environment": self.environment, "rows": [asdict(r) for r in self.rows],
                "skipped": [asdict(s) for s in self.skipped]}


def bf16_grouped(x, w, ids, weights):
    """The unquantized experts in bf16 for routed tokens: torch._grouped_mm (cuBLAS grouped
    GEMM, no host sync) where this torch has it on this device, else one F.linear an expert
    over its tokens; rows combined with their routing weights in fp32, out in x's dtype."""
    import torch
    import torch.nn.functional as F

    if hasattr(torch, "_grouped_mm") and x.is_cuda:
        top_k = ids.shape[1]
        flat = ids.reshape(-1)
        order = torch.sort(flat, stable=True).indices
        counts = torch.zeros(w.shape[0], dtype=torch.int32, device=x.device)
        counts.scatter_add_(0, flat.index_select(0, order).int(),
                            torch.ones_like(flat, dtype=torch.int32))
        y = torch._grouped_mm(x.index_select(0, order // top_k), w.transpose(-2, -1),
                              offs=torch.cumsum(counts, 0, dtype=torch.int32))
        rows = torch.empty_like(y, dtype=torch.float32)
        rows.index_copy_(0, order, y.float())
        return (rows.view(x.shape[0], top_k, -1) * weights[..., None]).sum(1).to(x.dtype)
    out = torch.zeros(x.shape[0], w.shape[1], dtype=torch.float32, device=x.device)
    for e in range(w.shape[0]):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel():
            out.index_add_(0, tok, F.linear(x[tok], w[e]).float() * weights[tok, slot, None])
    return out.to(x.dtype)


def run_moe_bench(schemes: Sequence[str] | None = None,
                  shapes: Sequence[MoeShape] = DEFAULT_MOE_SHAPES,
                  tokens: Sequence[int] = DEFAULT_TOKENS, *, device: str = "cuda",
                  catalog: Catalog | None = None, seed: int = 0,
                  timing: TimingConfig = TimingConfig(), progress: Progress | None = None,
                  command: str | None = None, backend: str = "auto") -> MoeResult:
    """Check and time every (scheme, MoE shape, T); see the module docstring. A scheme no MoE
    kernel runs here is listed in `skipped` with resolve's refusal, never a silent gap; a layer
    that raises otherwise gives ERROR rows. `backend`: the layer's (tests and tools force
    "triton"; the CLI times what resolve picks)."""
    import torch

    from kernels.spec.platform import Platform, detect
    from registry.files.catalog import load_schemes

    if _is_cuda(device) and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but torch.cuda.is_available() is False; run on a "
                         "GPU machine (device='cpu' checks the logic only)")
    catalog = catalog or load_schemes()
    picked = [catalog.get(n) for n in schemes] if schemes else \
        sorted(catalog.schemes.values(), key=lambda s: s.name)
    picked = list({s.name: s for s in picked}.values())  # a name and its alias: once
    plat = detect() if _is_cuda(device) else Platform("cpu")
    copy_tbs = copy_bandwidth(device, (1 << 30) if _is_cuda(device) else 1 << 24)
    env = dict(environment(device, plat, copy_tbs, command), kind="moe")
    total = len(picked) * len(shapes) * len(tokens)
    rows: list[MoeRow] = []
    skipped: list[Skip] = []
    baselines: dict = {}
    say = progress or (lambda *a: None)
    with torch.no_grad():
        for scheme in picked:
            for shape in shapes:
                rows += _run_shape(scheme, shape, tokens, device, seed, timing, baselines,
                                   skipped, say, len(rows), total, backend)
    return MoeResult(rows, skipped, env)


@contextlib.contextmanager
def _quiet(log: logging.Logger) -> Iterator[None]:
    """`log` silent below ERROR for the duration."""
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _run_shape(scheme, shape: MoeShape, tokens: Sequence[int], device, seed: int,
               timing: TimingConfig, baselines: dict, skipped: list, say, done: int,
               total: int, backend: str) -> list[MoeRow]:
    import torch

    from kernels.reference.moe import route
    from kernels.select.resolve import ResolutionError
    from registry.nn.layers import MXGroupedExperts

    gen = torch.Generator(device=device).manual_seed(seed + 7919 * shape.n + shape.k)
    w = (torch.randn(shape.experts, shape.n, shape.k, generator=gen, device=device)
         * WEIGHT_STD).to(torch.bfloat16)
    static = scheme.activation is not None and scheme.activation.static
    calibration = torch.randn(16, shape.k, generator=gen, device=device).to(torch.bfloat16) \
        if static else None
    fields = dict(experts=shape.experts, top_k=shape.top_k, n=shape.n, k=shape.k)
    try:
        layer = MXGroupedExperts(w, scheme, backend=backend, calibration=calibration)
        with _quiet(logging.getLogger("registry.resolve")):  # the oracle's forced kernel: meant
            ref = MXGroupedExperts(w, scheme, backend="reference", act_scale=layer.act_scale)
    except ResolutionError as e:  # no MoE kernel for it here: said in the report's skipped
        skipped.append(Skip(scheme.name, "-", str(shape), str(e)))
        return []
    except Exception as e:  # noqa: BLE001 - reported in the rows, never dropped
        why = f"building the layer raised {type(e).__name__}: {e}".replace("\n", " ")
        out = [MoeRow(scheme.name, "-", tokens=t, status="ERROR", notes=[why], **fields)
               for t in tokens]
        for i, row in enumerate(out):
            say("row", done + i, total, row)
        return out
    rows = []
    for i, t in enumerate(tokens):
        say("start", done + i, total, (scheme.name, shape, t))
        x = torch.randn(t, shape.k, generator=gen, device=device).to(torch.bfloat16)
        logits = torch.randn(t, shape.experts, generator=gen, device=device)
        row = MoeRow(scheme.name, layer.kernel_name, tokens=t, status="ok",
                     qdq=layer.qdq_kernel, **fields)
        step = "check"
        try:
            _check(row, layer(x, logits, shape.top_k), ref(x, logits, shape.top_k))
            if row.status == "ok":  # a wrong layer is never timed
                step = "timing"
                key = (shape, t)
                if key not in baselines:
                    baselines[key] = _time_both([w], lambda wt: bf16_grouped(
                        x, wt, *route(logits, shape.top_k)), device, timing)
                graph, eager, note = _time_both([layer], lambda lay: lay(x, logits, shape.top_k),
                                                device, timing)
                _fill(row, graph, eager, note, baselines[key])
        except Exception as e:  # noqa: BLE001 - reported in the row, never dropped
            mark_raised(row, step, e)
        say("row", done + i, total, row)
        rows.append(row)
    return rows


def _check(row: MoeRow, out, want) -> None:
    """Every token's output against the reference backend's (rows are independent)."""
    judge(row, out, want, "the reference backend", "every token")


def _fill(row: MoeRow, graph, eager, note, base) -> None:
    row.graph_us = None if graph is None else graph * 1e3
    row.eager_us = eager * 1e3
    row.notes += [note] if note else []
    fill_ratio(row, base)


__all__ = ["DEFAULT_MOE_SHAPES", "DEFAULT_TOKENS", "MoeResult", "MoeRow", "MoeShape",
           "bf16_grouped", "parse_moe_shapes", "run_moe_bench"]
