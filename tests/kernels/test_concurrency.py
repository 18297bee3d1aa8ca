"""Concurrency: resolve, the scheme catalog, the kernel table, load_kernel, the kernels' lazy
caches and the layers are safe from many threads at once, and give the single-threaded results.

Every test starts its threads together (threading.Barrier) and compares each thread's results
with the single-threaded ones (bit for bit for tensors). Triton kernels run in its CPU
interpreter, which is not thread-safe itself (it patches triton.language and keeps the grid
position in one global builder: two interpreted launches at once fail with "x >= grid_dim[0]"),
so interpreted *launches* are serialized (tools/check_determinism.serialize_interpreter); the
host code around them (preparation, cache fills, QDQ set-up) still runs concurrently. Compiled
GPU launches from several threads are checked by tools/check_determinism.py on the H200.
"""
from __future__ import annotations

import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import pytest
import torch

import kernels.select.kernel_table as kt
from kernels.base import LinearKernel, PreparedWeight, load_kernel
from kernels.moe import MXGroupedExperts
from kernels.select.resolve import ResolutionError, resolve
from kernels.spec.platform import KNOWN_PLATFORMS, Platform
from kernels.triton import linear_decode, linear_emulation
from kernels.triton.linear_emulation import fused_linear
from registry.files.catalog import load_schemes
from registry.nn.layers import MXLinear
from registry.machine.probe import runnable_here

from support.device import DEVICE  # Triton kernels: the GPU when there is one, else the interpreter
from support.paths import PLUGIN_PKG
from support.tools import load_tool

cd = load_tool("check_determinism")

THREADS = 8
CATALOG = load_schemes(env={})
SCHEMES = sorted(CATALOG.schemes.values(), key=lambda s: s.name)


def hammer(fn: Callable[[int, int], Any], iterations: int, threads: int = THREADS) -> list:
    """fn(thread, iteration) from `threads` threads started together; every result, in order.
    An exception in any thread fails the test (re-raised here)."""
    barrier = threading.Barrier(threads)

    def worker(t: int) -> list:
        barrier.wait()
        return [fn(t, i) for i in range(iterations)]

    with ThreadPoolExecutor(threads) as pool:
        return [r for rs in pool.map(worker, range(threads)) for r in rs]


@pytest.fixture
def interpreter_lock():
    with cd.serialize_interpreter():
        yield


def gen(*parts: object) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(" ".join(map(str, parts)).encode()))


# --- resolve, the catalog, the kernel table, load_kernel -------------------------------------
def _resolution(scheme, platform: str, shape, strict: bool = False) -> dict | str:
    try:
        return resolve(scheme, platform, shape=shape, strict=strict).to_dict()
    except ResolutionError as e:
        return f"ResolutionError: {e}"


def test_resolve_from_many_threads_matches_single_threaded() -> None:
    cases = [(s, p, shape, strict) for s in SCHEMES for p in KNOWN_PLATFORMS
             for shape in (None, (48, 128)) for strict in (False, True)]
    want = [_resolution(*c) for c in cases]
    assert any(isinstance(w, str) for w in want) and any(isinstance(w, dict) for w in want)

    def one(t: int, i: int) -> tuple[int, dict | str]:
        j = (t * 7919 + i * 31) % len(cases)  # each thread walks the cases in its own order
        return j, _resolution(*cases[j])

    results = hammer(one, iterations=200)  # 1600 look-ups
    assert len(results) == THREADS * 200
    for j, got in results:
        assert got == want[j], f"case {j} ({cases[j][0].name} on {cases[j][1]}) differs"


def _catalog_view(catalog) -> tuple:
    return (tuple((s.name, str(s.contract), tuple(s.aliases), str(s.source)) for s in catalog),
            tuple(sorted(catalog.aliases.items())), tuple(str(f) for f in catalog.findings))


def test_load_schemes_from_many_threads() -> None:
    want = _catalog_view(load_schemes(env={}))
    results = hammer(lambda t, i: _catalog_view(load_schemes(env={})), iterations=4)
    assert all(r == want for r in results)
    assert len(want[0]) == len(SCHEMES) and not want[2]


def _table_view(table: kt.KernelTable) -> tuple:
    return (table.names, table.plugins_enabled, tuple(map(str, table.problems)),
            tuple(str(p) for p in table.plugins),
            {str(p): tuple(d.name for d in table.candidates_for(Platform.parse(p)))
             for p in KNOWN_PLATFORMS} if not table.problems else None)


@pytest.fixture
def plugin_installed(tmp_path, monkeypatch):
    """The test plugin (tests/data/plugin_pkg) installed as a distribution, as support.plugin's `install`."""
    site = tmp_path / "site"
    info = site / "acme_mx_kernels-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-mx-kernels\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[registry.kernels]\nacme = acme_mx_kernels.decls:kernels\n")
    monkeypatch.syspath_prepend(str(PLUGIN_PKG))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv(kt.ENV_DISABLE_PLUGINS, raising=False)
    kt.reset_kernel_table()
    yield
    kt.reset_kernel_table()


@pytest.mark.parametrize("plugins", (False, True), ids=("built-in", "with-plugin"))
def test_cold_kernel_table_is_built_once_from_many_threads(plugins: bool, request,
                                                           monkeypatch) -> None:
    """8 threads ask for the table right after a reset: one build (slowed down, so the threads
    really pile up on it), one table object, the same as a single-threaded build."""
    if plugins:
        request.getfixturevalue("plugin_installed")
    else:
        monkeypatch.setenv(kt.ENV_DISABLE_PLUGINS, "1")
    kt.reset_kernel_table()
    want = _table_view(kt.kernel_table())
    assert ("acme-first" in want[0]) == plugins
    real_build, builds = kt._build, []

    def slow_build(enabled: bool) -> kt.KernelTable:
        builds.append(threading.get_ident())
        time.sleep(0.05)
        return real_build(enabled)

    monkeypatch.setattr(kt, "_build", slow_build)
    for _ in range(3):
        kt.reset_kernel_table()
        builds.clear()
        tables = hammer(lambda t, i: kt.kernel_table(), iterations=1)
        assert len(builds) == 1, f"the table was built {len(builds)} times"
        assert all(t is tables[0] for t in tables)
        assert _table_view(tables[0]) == want
    kt.reset_kernel_table()


def test_reset_while_other_threads_resolve(plugin_installed) -> None:
    """Resets racing look-ups: every look-up sees a whole table (never a half-built one)."""
    scheme = CATALOG.get("w_mxfp4")
    want = _resolution(scheme, "cuda:sm90", None)

    def one(t: int, i: int) -> dict | str:
        if t == 0 and i % 2 == 0:
            kt.reset_kernel_table()
        return _resolution(scheme, "cuda:sm90", None)

    assert all(r == want for r in hammer(one, iterations=40))


def test_a_plugin_that_looks_up_the_table_while_it_is_built_gets_a_clear_error(
        plugin_installed, monkeypatch) -> None:
    """Re-entry from the building thread (a plugin entry point calling kernel_by_name) must be
    a one-line plugin problem, not a deadlock on the table's lock."""
    import acme_mx_kernels.decls as decls

    real = decls.kernels

    def reentrant():
        kt.kernel_by_name("triton-emulation")
        return real()

    monkeypatch.setattr(decls, "kernels", reentrant)
    kt.reset_kernel_table()
    done: list = []
    thread = threading.Thread(target=lambda: done.append(kt.kernel_table()), daemon=True)
    thread.start()
    thread.join(timeout=20)
    if not done:  # the thread waits on its own lock forever: give later tests a fresh lock
        kt._LOCK = threading.Lock()  # not monkeypatch: its undo would bring the held lock back
        pytest.fail("kernel_table() deadlocked when a plugin looked the table up while loading")
    problems = [str(p) for p in done[0].problems]
    assert len(problems) == 1 and "acme-mx-kernels" in problems[0] \
        and "while the kernel table is being built" in problems[0]


def test_load_kernel_from_many_threads() -> None:
    names = runnable_here(Platform("cpu"))

    def one(t: int, i: int) -> tuple[str, type, str]:
        name = names[(t + i) % len(names)]
        k = load_kernel(name)
        return name, type(k), k.name

    for name, cls, got in hammer(one, iterations=30):
        assert issubclass(cls, LinearKernel) and got == name


# --- shared layers and lazy caches -------------------------------------------------------------
def _inputs(n: int, k: int, m: int, seed: object):
    g = gen(seed, n, k, m)
    w = torch.randn(n, k, generator=g) * 0.05
    xs = [torch.randn(m, k, generator=g).to(torch.bfloat16) for _ in range(3)]
    return w, xs, torch.randn(n, generator=g).to(torch.bfloat16)


@pytest.mark.parametrize("scheme_name", ("w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp6_e3m2_a_fp8"))
def test_shared_mxlinear_from_many_threads(scheme_name: str) -> None:
    """Forward on ONE layer from 8 threads (dequant-weight-only / reference-emulation on the
    CPU), a fresh layer per round so the lazily filled caches are raced too."""
    scheme = CATALOG.get(scheme_name)
    w, xs, b = _inputs(48, 128, 5, scheme_name)
    calib = xs[0] if scheme.activation is not None and scheme.activation.static else None
    for _ in range(3):
        layer = MXLinear(w, scheme, b, calibration=calib, act_dtype=torch.bfloat16)
        twin = MXLinear(w, scheme, b, calibration=calib, act_dtype=torch.bfloat16)
        want = [twin(x) for x in xs]
        got = hammer(lambda t, i: (i % 3, layer(xs[i % 3])), iterations=30)
        for j, out in got:
            assert cd.same_bits(out, want[j]), f"{layer.kernel_name}: a thread's output differs"


@pytest.mark.parametrize("kernel_name,scheme_name", [
    ("triton-emulation", "w_mxfp4_a_mxfp4"), ("triton-emulation", "w_mxint8_a_mxint8"),
    ("triton-dot-scaled", "w_mxfp8_e4m3_a_mxfp8_e4m3"),
    ("triton-fp8-mma", "w_mxfp8_e4m3_a_mxfp8_e4m3")])
def test_shared_triton_kernel_apply_from_many_threads(kernel_name: str, scheme_name: str,
                                                      interpreter_lock) -> None:
    scheme = CATALOG.get(scheme_name)
    kernel = load_kernel(kernel_name)
    w, xs, b = _inputs(32, 128, 3, kernel_name)
    xs[2] = torch.randn(20, 128, generator=gen(kernel_name)).to(torch.bfloat16)  # M > 16
    w, b, xs = w.to(DEVICE), b.to(DEVICE), [x.to(DEVICE) for x in xs]
    prepared = kernel.prepare(w, scheme.contract)
    want = [kernel.apply(x, prepared, b) for x in xs]
    got = hammer(lambda t, i: ((t + i) % 3, kernel.apply(xs[(t + i) % 3], prepared, b)),
                 iterations=3)
    assert all(cd.same_bits(out, want[j]) for j, out in got)


def test_fresh_prepared_weight_cache_filled_by_many_threads_at_once(interpreter_lock,
                                                                    monkeypatch) -> None:
    """A PreparedWeight made by another kernel's prepare() has an empty cache: triton-emulation
    derives its tensors, the fp4 scale check and the split fp4 layout lazily on first apply.
    8 threads do that first apply at once (the derivation slowed down so they pile up); all
    get the single-threaded bits and the cache ends with one whole entry per key."""
    scheme = CATALOG.get("w_mxfp4_a_mxfp4")
    w, xs, b = _inputs(32, 128, 4, "lazy")
    w, b, xs = w.to(DEVICE), b.to(DEVICE), [x.to(DEVICE) for x in xs]
    config = linear_decode.DecodeConfig(block_n=16, block_k=64, split=2, warps=1, stages=1,
                                        split_fp4=True)
    reference = load_kernel("reference-emulation")
    twin = reference.prepare(w, scheme.contract)
    want = fused_linear(xs[0], twin, b, strategy="decode", config=config)
    real = linear_emulation.prepare_tensors

    def slow(prepared: PreparedWeight) -> dict:
        time.sleep(0.02)
        return real(prepared)

    monkeypatch.setattr(linear_emulation, "prepare_tensors", slow)
    for _ in range(3):
        prepared = reference.prepare(w, scheme.contract)
        assert not prepared.cache
        got = hammer(lambda t, i: fused_linear(xs[0], prepared, b, strategy="decode",
                                               config=config), iterations=1)
        assert all(cd.same_bits(out, want) for out in got)
        assert set(prepared.cache) == set(twin.cache)
        entry = prepared.cache["triton_emulation"]
        assert entry["consts"] == twin.cache["triton_emulation"]["consts"]
        mine, theirs = entry, twin.cache["triton_emulation"]  # the decode's derived tensors
        assert set(mine) == set(theirs) >= {"fast_fp4_scale", "decode_split_fp4_64"}
        assert mine["fast_fp4_scale"] == theirs["fast_fp4_scale"]
        assert cd.same_bits(mine["decode_split_fp4_64"], theirs["decode_split_fp4_64"])


def test_weight_only_cache_per_dtype_filled_by_many_threads() -> None:
    """dequant-weight-only keeps one dequantized weight per activation dtype, made on first
    use: threads of three dtypes at once each get their dtype's bits."""
    scheme = CATALOG.get("w_mxfp6_e2m3")
    kernel = load_kernel("dequant-weight-only")
    w, _, _ = _inputs(32, 96, 2, "dtypes")
    x = torch.randn(6, 96, generator=gen("dtypes-x"))
    dtypes = (torch.bfloat16, torch.float16, torch.float32)
    twin = kernel.prepare(w, scheme.contract)
    want = {d: kernel.apply(x.to(d), twin) for d in dtypes}
    for _ in range(3):
        prepared = kernel.prepare(w, scheme.contract)
        got = hammer(lambda t, i: (dtypes[t % 3], kernel.apply(x.to(dtypes[t % 3]), prepared)),
                     iterations=5)
        assert all(cd.same_bits(out, want[d]) for d, out in got)
        assert sorted(prepared.cache) == sorted(twin.cache)


@pytest.mark.parametrize("backend", ("reference", "triton"))
def test_moe_layer_from_many_threads(backend: str, interpreter_lock) -> None:
    """One MXGroupedExperts from 8 threads, a fresh layer per round (its Triton set-up cache is
    filled lazily by the first forward)."""
    scheme = CATALOG.get("w_mxfp6_e3m2_a_mxfp6_e3m2")
    g = gen("moe", backend)
    w = torch.randn(4, 24, 64, generator=g) * 0.05
    x = torch.randn(9, 64, generator=g).to(torch.bfloat16)
    logits = torch.randn(9, 4, generator=g)
    if backend == "triton":
        w, x, logits = w.to(DEVICE), x.to(DEVICE), logits.to(DEVICE)
    want = MXGroupedExperts(w, scheme, backend=backend)(x, logits, 2)
    for _ in range(2):
        layer = MXGroupedExperts(w, scheme, backend=backend)
        got = hammer(lambda t, i: layer(x, logits, 2), iterations=2 if backend == "triton"
                     else 10)
        assert all(cd.same_bits(out, want) for out in got)
