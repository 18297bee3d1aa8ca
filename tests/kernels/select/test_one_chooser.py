"""One chooser (issue 13): linear, MoE and QDQ kernels are declared alike and picked by the same
resolve, with reasons and deviations; strict mode and disabling apply to all three kinds.

The acceptance test: disabling the Triton QDQ kernel (REGISTRY_DISABLED_KERNELS=triton-qdq)
changes what MXGroupedExperts runs, and strict mode refuses it in one line. Triton is the first
choice on a GPU platform only, so on a machine without a GPU the layer's platform is made
cuda:sm90 (monkeypatched) and its Triton kernels run in the interpreter (tests/conftest.py).
"""
from __future__ import annotations

import functools
import logging

import pytest
import torch

import kernels.moe as moe
import kernels.reference.mx as reference_mx
from kernels import choice, dispatch, mx
from kernels.choice import KernelChoiceError
from kernels.select import declarations as decls
from kernels.select import resolve as resolving
from kernels.select.activation_keys import DISPATCH_KEYS, FP8_STATIC_TENSOR_KEY
from kernels.select.resolve import ResolutionError, resolve, resolve_cached
from kernels.spec.contract import QuantKey, ScaleDesc
from kernels.spec.platform import Platform
from registry import load_schemes

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
GPU = Platform("cuda", "sm90")
KEY = QuantKey.mx("mxfp4", rounding="even", static=False)
UNKNOWN = QuantKey(format="fp8_e4m3", scale=ScaleDesc(format="fp32", granularity="token",
                                                      static=False))
ENV_DISABLED, ENV_STRICT = "REGISTRY_DISABLED_KERNELS", "REGISTRY_STRICT"


@functools.lru_cache(maxsize=None)
def scheme(name: str):
    return load_schemes().get(name)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for var in (ENV_DISABLED, ENV_STRICT):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def on_gpu_platform(monkeypatch):
    """Tensors on DEVICE resolve as a GPU's: the real one on a GPU host, else cuda:sm90 with the
    Triton kernels in the interpreter."""
    if DEVICE == "cpu":
        monkeypatch.setattr(moe, "device_platform", lambda device: GPU)
        monkeypatch.setattr(choice, "device_platform", lambda device: GPU)


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# --- the declarations -------------------------------------------------------------------------

def test_every_kind_is_declared_alike_and_read_from_one_table():
    from kernels.select.kernel_table import kernel_decls, kernel_table

    kinds = {d.name: d.kind for d in decls.ALL_KERNELS}
    assert {n for n, k in kinds.items() if k == "qdq"} == {"triton-qdq", "reference-qdq"}
    assert {n for n, k in kinds.items() if k == "moe"} == {"triton-moe", "reference-moe"}
    assert len(kinds) == len(decls.ALL_KERNELS)  # one name space over the kinds
    assert set(kernel_table().names) == set(kinds)  # --disable takes any of them
    assert [d.name for d in kernel_decls()] == [d.name for d in decls.KERNELS]  # linear
    assert {d.name for d in kernel_decls(None)} == set(kinds)
    for d in decls.ALL_KERNELS:
        assert all(kinds[u] == "qdq" for u in d.uses), d.name
    assert {d.backend for d in decls.QDQ_KERNELS} == {d.backend for d in decls.MOE_KERNELS} \
        == {"triton", "reference"}


def test_the_dispatcher_keys_are_what_the_qdq_kernels_declare():
    """Lint's dispatcher check and kernels.dispatch read DISPATCH_KEYS: it is derived from the
    qdq declarations, not kept equal to them."""
    assert DISPATCH_KEYS is decls.DISPATCH_KEYS
    assert DISPATCH_KEYS == frozenset().union(*(d.keys for d in decls.QDQ_KERNELS))
    assert set(dispatch._TABLE) == DISPATCH_KEYS
    assert mx.BACKENDS == ("auto", "reference", "triton") == moe.BACKENDS


def test_a_plugin_may_not_declare_a_qdq_or_moe_kernel():
    from kernels.select.kernel_table import _check_item

    qdq = decls.KERNELS_BY_NAME["reference-qdq"]
    assert "kernel plugins declare linear kernels" in _check_item(qdq)


# --- resolve(kind=...) ------------------------------------------------------------------------

@pytest.mark.parametrize("platform, qdq, moe_kernel", [
    ("cpu", ["reference-qdq"], ["reference-moe"]),
    ("xpu", ["reference-qdq"], ["reference-moe"]),
    ("cuda:sm90", ["triton-qdq", "reference-qdq"], ["triton-moe", "reference-moe"]),
    ("rocm:gfx950", ["triton-qdq", "reference-qdq"], ["triton-moe", "reference-moe"]),
])
def test_qdq_and_moe_resolve_with_reasons(platform, qdq, moe_kernel):
    res = resolve(KEY, platform, kind="qdq")
    assert [c.kernel for c in res.candidates] == qdq and res.kernel == qdq[0]
    assert res.deviations == () and all(c.reason for c in res.candidates)
    assert res.to_dict()["kind"] == "qdq" and res.to_dict()["key"] == str(KEY)
    if len(qdq) > 1:
        assert res.candidates[1].reason == f"not needed: {qdq[0]} was chosen first"
    res = resolve(scheme("w_mxfp4_a_mxfp6_e3m2"), platform, kind="moe")
    assert [c.kernel for c in res.candidates] == moe_kernel and res.kernel == moe_kernel[0]
    assert res.scheme == "w_mxfp4_a_mxfp6_e3m2" and res.to_dict()["kind"] == "moe"
    assert res.candidates[0].reason.startswith("implements every MX weight x every activation")


def test_an_unknown_key_resolves_to_no_qdq_kernel_with_every_reason():
    for platform in ("cpu", "cuda:sm90"):
        with pytest.raises(ResolutionError) as e:
            resolve(UNKNOWN, platform, kind="qdq")
        msg = one_line(e)
        assert msg.startswith(f"no qdq kernel implements {UNKNOWN} on {platform}: ")
        assert f"key {UNKNOWN} not implemented" in msg
        assert all(f"key {UNKNOWN} not implemented (takes " in c.reason
                   for c in e.value.resolution.candidates)
    static = QuantKey.mx("mxfp4", rounding="even", static=True)
    with pytest.raises(ResolutionError, match="static MX key .* rejected"):
        resolve(static, "cpu", kind="qdq")


def test_kind_mistakes_are_one_line_errors():
    with pytest.raises(TypeError, match="kind='qdq'.*takes a QuantKey"):
        resolve(scheme("w_mxfp4").contract, "cpu", kind="qdq")
    with pytest.raises(ValueError, match="unknown kernel kind 'conv'; kinds: linear, moe, qdq"):
        resolve(scheme("w_mxfp4"), "cpu", kind="conv")
    with pytest.raises(ValueError, match="^unknown kernel 'triton-emulation' in force=; known "
                                         "kernels: triton-qdq, reference-qdq$"):
        resolve(KEY, "cuda:sm90", kind="qdq", force="triton-emulation")
    # a linear matrix cell for a qdq kernel says why, it does not raise
    ok, why = resolving.accepts(decls.KERNELS_BY_NAME["triton-qdq"], scheme("w_mxfp4").contract)
    assert not ok and "quantization keys, not a scheme contract" in why


def test_disabling_the_triton_qdq_kernel_moves_every_kind_and_strict_refuses_it():
    w4a4 = scheme("w_mxfp4_a_mxfp4")
    off = ["triton-qdq"]
    q = resolve(KEY, "cuda:sm90", kind="qdq", disabled=off)
    assert q.kernel == "reference-qdq" and [d.kind for d in q.deviations] == ["disabled"]
    assert q.candidates[0].reason == f"disabled (--disable / {ENV_DISABLED})"
    m = resolve(w4a4, "cuda:sm90", kind="moe", disabled=off)
    assert m.kernel == "reference-moe"
    assert m.candidates[0].reason == "uses triton-qdq, which is disabled"
    assert str(m.deviations[0]) == ("disabled: triton-moe would run but uses triton-qdq, which "
                                    "is disabled (disabled=/--disable); reference-moe runs "
                                    "instead")
    lin = resolve(w4a4, "cuda:sm90", disabled=off)  # the Triton linear kernels use it too
    assert lin.kernel == "reference-emulation" and lin.deviations[0].kind == "disabled"
    assert "triton-emulation would run but uses triton-qdq" in lin.deviations[0].message
    for subject, kind in ((KEY, "qdq"), (w4a4, "moe"), (w4a4, "linear")):
        with pytest.raises(ResolutionError, match="^strict mode: .*disabled: ") as e:
            resolve(subject, "cuda:sm90", kind=kind, disabled=off, strict=True)
        one_line(e)
    # nothing disabled: the plain choices, no deviation (linear resolution unchanged)
    assert resolve(w4a4, "cuda:sm90").kernel == "triton-emulation"
    assert resolve(w4a4, "cuda:sm90", kind="moe").deviations == ()


def test_disabling_the_reference_qdq_kernel_leaves_the_cpu_nothing():
    with pytest.raises(ResolutionError, match="^no qdq kernel implements .* on cpu: "
                                              "reference-qdq: disabled"):
        resolve(KEY, "cpu", kind="qdq", disabled=["reference-qdq"])
    with pytest.raises(ResolutionError, match="reference-moe: uses reference-qdq, which is "
                                              "disabled"):
        resolve(scheme("w_mxfp4"), "cpu", kind="moe", disabled=["reference-qdq"])


def test_triton_runs_on_the_cpu_only_forced_and_interpreted(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # what resolve reads (a what-if on a GPU host)
    assert resolve(KEY, "cpu", kind="qdq", force="triton-qdq").kernel == "triton-qdq"
    reason = resolve(KEY, "cpu", kind="qdq", force="triton-qdq").candidates[0].reason
    assert reason.endswith("(in the Triton interpreter on cpu)")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ResolutionError, match="triton-moe: runs on cpu only in the Triton "
                                              "interpreter: set TRITON_INTERPRET=1"):
        resolve(scheme("w_mxfp4"), "cpu", kind="moe", force="triton-moe")


# --- the cached per-call choice ---------------------------------------------------------------

def test_the_per_call_choice_is_cached_and_reads_the_environment_each_call(monkeypatch):
    calls = []
    real = resolving.resolve

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(resolving, "resolve", counting)
    resolving.clear_resolution_cache()
    first = resolve_cached(KEY, GPU, kind="qdq")
    assert all(resolve_cached(KEY, GPU, kind="qdq") is first for _ in range(50))
    assert len(calls) == 1 and first.kernel == "triton-qdq"
    monkeypatch.setenv(ENV_DISABLED, "triton-qdq")  # a changed variable: a new answer
    assert resolve_cached(KEY, GPU, kind="qdq").kernel == "reference-qdq" and len(calls) == 2
    monkeypatch.setenv(ENV_STRICT, "1")  # refusals are not remembered: they raise each time
    for _ in range(2):
        with pytest.raises(ResolutionError, match="strict mode"):
            resolve_cached(KEY, GPU, kind="qdq")
    assert len(calls) == 4
    monkeypatch.delenv(ENV_STRICT)
    monkeypatch.delenv(ENV_DISABLED)
    assert resolve_cached(KEY, GPU, kind="qdq") is first and len(calls) == 4


def test_mx_api_auto_is_the_qdq_choice(monkeypatch, on_gpu_platform):
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(13)).to(DEVICE)
    dev = x.device
    assert mx.qdq_kernel("auto", "mxfp4", "even", dev) == "triton-qdq"
    want = mx.mx_qdq(x, "mxfp4", "even", backend="reference-qdq")
    assert torch.equal(mx.mx_qdq(x, "mxfp4", "even"), want)
    monkeypatch.setenv(ENV_DISABLED, "triton-qdq")
    assert mx.qdq_kernel("auto", "mxfp4", "even", dev) == "reference-qdq"
    assert torch.equal(mx.mx_qdq(x, "mxfp4", "even"), want)  # the same bits, another kernel
    assert torch.equal(dispatch.activation_qdq(KEY)(x, None), want)
    monkeypatch.setenv(ENV_STRICT, "1")
    for call in (lambda: mx.mx_qdq(x, "mxfp4", "even"),
                 lambda: mx.mx_quantize(x, "mxfp4", "even"),
                 lambda: dispatch.activation_qdq(KEY)(x, None),
                 lambda: dispatch.activation_qdq(FP8_STATIC_TENSOR_KEY)(x, torch.tensor(0.1))):
        with pytest.raises(KernelChoiceError, match="^strict mode: .*disabled: triton-qdq "
                                                    "would run but is disabled") as e:
            call()
        assert isinstance(e.value, ValueError) and one_line(e)
    # a kernel that runs a qdq kernel inside itself names it: no choice, nothing to refuse
    assert torch.equal(mx.mx_qdq(x, "mxfp4", "even", backend="reference-qdq"), want)


def test_an_explicit_backend_is_forced_and_strict_refuses_it(monkeypatch):
    x = torch.randn(2, 32)
    assert mx.qdq_kernel("reference", "mxfp4", "floor", x.device) == "reference-qdq"
    res = choice.choose("qdq", choice.mx_key("mxfp4", "floor"), x.device, "reference")
    assert [str(d) for d in res.deviations] == [
        "forced: kernel reference-qdq was forced (backend='reference'); the platform's order "
        "was not consulted"]
    monkeypatch.setenv(ENV_STRICT, "1")
    mx.mx_qdq(x, "mxfp4")  # auto: the plain choice, nothing to refuse
    with pytest.raises(ValueError, match=r"^strict mode: .*forced: .*\(drop backend='reference'\)"):
        mx.mx_qdq(x, "mxfp4", backend="reference")
    contract = scheme("w_mxfp4_a_mxfp4").contract
    with pytest.raises(ResolutionError, match="^strict mode: .*forced: kernel reference-moe"):
        moe.MXGroupedExperts(torch.randn(2, 16, 64), contract, backend="reference")


@pytest.mark.parametrize("call", [
    lambda: mx.mx_qdq(torch.randn(2, 32), "mxfp4", backend="cuda"),
    lambda: dispatch.activation_qdq(KEY, backend="cuda"),
    lambda: moe.MXGroupedExperts(torch.randn(2, 16, 64), scheme("w_mxfp4").contract,
                                 backend="cuda"),
])
def test_an_unknown_backend_is_one_line_listing_the_valid_ones(call):
    with pytest.raises(ValueError, match="unknown backend 'cuda'; valid backends: auto, "
                                         "reference, triton") as e:
        call()
    one_line(e)


# --- MXGroupedExperts: THE acceptance test ----------------------------------------------------

def _inputs(seed: int = 7):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(4, 16, 64, generator=g) * 0.1).to(DEVICE)
    x = torch.randn(5, 64, generator=g).to(DEVICE)
    ids = torch.stack([torch.randperm(4, generator=g)[:2] for _ in range(5)]).to(DEVICE)
    return w, x, ids, (torch.rand(5, 2, generator=g) + 0.1).to(DEVICE)


def test_disabling_triton_qdq_changes_what_moe_runs_and_strict_refuses_it(monkeypatch, caplog,
                                                                           on_gpu_platform):
    s = scheme("w_mxfp4_a_mxfp6_e3m2")  # the seed bug's path: an mxfp6 activation QDQ
    w, x, ids, rw = _inputs()
    qdq_calls = []
    real_qdq = reference_mx.qdq
    monkeypatch.setattr(reference_mx, "qdq",
                        lambda *a, **k: qdq_calls.append(a[1].name) or real_qdq(*a, **k))

    plain = moe.MXGroupedExperts(w, s)
    assert (plain.kernel_name, plain.qdq_kernel) == ("triton-moe", "triton-qdq")
    assert plain.resolution.deviations == () and plain.qdq_resolution.deviations == ()
    fused = plain.forward_routed(x, ids, rw, out_dtype=torch.float32)
    assert qdq_calls == []  # triton-moe quantizes inside its launch

    monkeypatch.setenv(ENV_DISABLED, "triton-qdq")
    with caplog.at_level(logging.WARNING, logger="registry.resolve"):
        layer = moe.MXGroupedExperts(w, s)
        logged = [r.getMessage() for r in caplog.records
                  if r.getMessage().startswith("MXGroupedExperts(")]
        caplog.clear()
        for _ in range(3):
            out = layer.forward_routed(x, ids, rw, out_dtype=torch.float32)
        assert caplog.records == []  # logged once when built, never per call
    assert (layer.kernel_name, layer.qdq_kernel) == ("reference-moe", "reference-qdq")
    assert [d.kind for d in layer.resolution.deviations] == ["disabled"]
    assert "triton-moe would run but uses triton-qdq, which is disabled " \
           f"({ENV_DISABLED})" in str(layer.resolution.deviations[0])
    assert [d.kind for d in layer.qdq_resolution.deviations] == ["disabled"]
    assert qdq_calls == ["mxfp6_e3m2"] * 3  # the activation QDQ ran through reference-qdq
    assert len(logged) == 2, logged  # the moe kernel and its activation QDQ
    assert logged[0].startswith("MXGroupedExperts(w_mxfp4_a_mxfp6_e3m2): runs reference-moe")
    assert "activation QDQ: runs reference-qdq" in logged[1]
    assert "kernel=reference-moe, qdq=reference-qdq" in repr(layer)
    # only the dot's summation order differs between the two
    # (ACC_BOUND of tests/support/moe_oracle.py)
    err = float((out.double() - fused.double()).norm() / fused.double().norm())
    assert err <= 1e-5, err

    monkeypatch.setenv(ENV_STRICT, "1")
    with pytest.raises(ResolutionError, match="^strict mode: w_mxfp4_a_mxfp6_e3m2 on "
                                              ".*disabled: triton-moe would run but uses "
                                              "triton-qdq, which is disabled") as e:
        moe.MXGroupedExperts(w, s)
    one_line(e)


def test_a_moved_layer_resolves_again_for_its_new_platform(monkeypatch):
    w, x, ids, rw = (t.cpu() for t in _inputs(3))
    layer = moe.MXGroupedExperts(w, scheme("w_mxfp4_a_mxfp4"), strict=True)
    assert layer.resolution.platform == "cpu" and layer.kernel_name == "reference-moe"
    ref = layer.forward_routed(x, ids, rw, out_dtype=torch.float32)
    if DEVICE == "cuda":
        layer.to(DEVICE)
        x, ids, rw = x.to(DEVICE), ids.to(DEVICE), rw.to(DEVICE)
    else:  # the same tensors, read as a GPU's (Triton in the interpreter)
        monkeypatch.setattr(moe, "device_platform", lambda device: GPU)
    out = layer.forward_routed(x, ids, rw, out_dtype=torch.float32).cpu()
    assert layer.resolution.platform != "cpu" and layer.kernel_name == "triton-moe"
    assert float((out.double() - ref.double()).norm() / ref.double().norm()) <= 1e-5
    monkeypatch.setenv(ENV_DISABLED, "triton-qdq")  # the layer keeps what it resolved
    layer.forward_routed(x, ids, rw)
    assert layer.kernel_name == "triton-moe"


def test_moe_takes_disabled_and_strict_like_a_linear_layer():
    contract = scheme("w_mxfp8_e4m3").contract  # weight-only: no activation QDQ to resolve
    layer = moe.MXGroupedExperts(torch.randn(2, 16, 64), contract, disabled=["triton-moe"])
    assert layer.qdq_resolution is None and layer.qdq_kernel is None
    assert layer.kernel_name == "reference-moe" and layer.resolution.deviations == ()
    with pytest.raises(ResolutionError, match="^no moe kernel implements .* on cpu: "
                                              "reference-moe: disabled"):
        moe.MXGroupedExperts(torch.randn(2, 16, 64), contract, disabled=["reference-moe"])
    with pytest.raises(ValueError, match="unknown kernel 'nope' in disabled="):
        moe.MXGroupedExperts(torch.randn(2, 16, 64), contract, disabled=["nope"])
