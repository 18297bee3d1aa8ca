"""The cases tools/check_determinism.py runs, and how one case is checked bit for bit.

Sections (each yields (Row, build); build() -> (call, fresh)): linear (kernels x schemes),
decode (the DecodeConfigs linear_decode.default_config picks), codec (mx_quantize /
mx_dequantize / mx_qdq), moe (MXGroupedExperts). Also the inputs with zero, subnormal, NaN and
Inf blocks, the NaN-safe bit comparison (same_bits / max_ulp), run_case (repeats, a fresh
prepared state, threads at once) and serialize_interpreter (the Triton interpreter is not
thread-safe). Kernel modules are imported inside the section functions, so that the caller
can set TRITON_INTERPRET=1 first (check_determinism.main does).
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import torch

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
    from kernels.select.kernel_table import kernel_by_name
    from kernels.spec.platform import detect
    from registry.machine.probe import runnable_here
    from kernels.select.resolve import accepts

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
    from kernels.spec.formats import FORMATS
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
    from kernels.spec.formats import FORMATS, LAYOUTS, ROUNDINGS
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
