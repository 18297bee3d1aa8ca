"""Resolution: the acceptance matrix as data, and the three bugs the registry exists to prevent.

(a) an activation key the dispatcher does not know (mxfp6 QDQ silently skipped),
(b) a W4A4 scheme executed by a weight-only kernel (W4A16 without a word),
(c) a static MX activation key accepted.
"""
from __future__ import annotations

import itertools
import json

import pytest

import kernels.select.declarations as decls
from kernels.select.resolve import ResolutionError, accepts, resolve
from kernels.spec.contract import QuantKey, ScaleDesc, SchemeContract
from kernels.spec.platform import KNOWN_PLATFORMS, Platform
from registry import load_schemes

CATALOG = load_schemes()
ALL = sorted(CATALOG.schemes)
EMU = ("triton-emulation", "reference-emulation")

# Which kernels implement which shipped scheme's contract (platform aside), written out by hand.
ACCEPTS = {
    "w_mxfp4": {"triton-dot-scaled", "dequant-weight-only", *EMU},
    "w_mxfp4_a_mxfp4": {"scaled-mm-mx", "triton-dot-scaled", *EMU},
    "w_mxfp4_a_mxfp6_e3m2": set(EMU),
    "w_mxfp4_a_mxfp6_e2m3": set(EMU),
    "w_mxfp4_a_fp8": set(EMU),
    "w_mxfp6_e3m2": {"dequant-weight-only", *EMU},
    "w_mxfp6_e3m2_a_mxfp6_e3m2": set(EMU),
    "w_mxfp6_e3m2_a_fp8": set(EMU),
    "w_mxfp6_e2m3": {"dequant-weight-only", *EMU},
    "w_mxfp6_e2m3_a_mxfp6_e2m3": set(EMU),
    "w_mxfp6_e2m3_a_fp8": set(EMU),
    "w_mxfp8_e4m3": {"triton-dot-scaled", "dequant-weight-only", *EMU},
    "w_mxfp8_e4m3_a_mxfp8_e4m3": {"scaled-mm-mx", "triton-dot-scaled", "triton-fp8-mma", *EMU},
    "w_mxint8_a_mxint8": set(EMU),
    # auto-round's activation roundings (floor / rceil): quantized by the QDQ dispatcher first,
    # so the MX MMA kernels take them like the even ones
    "w_mxfp4_floor_a_mxfp4_floor": {"scaled-mm-mx", "triton-dot-scaled", *EMU},
    "w_mxfp4_floor_a_mxfp4_rceil": {"scaled-mm-mx", "triton-dot-scaled", *EMU},
    "w_mxfp8_e4m3_floor_a_mxfp8_e4m3_floor": {"scaled-mm-mx", "triton-dot-scaled",
                                              "triton-fp8-mma", *EMU},
    "w_mxfp8_e4m3_floor_a_mxfp8_e4m3_rceil": {"scaled-mm-mx", "triton-dot-scaled",
                                              "triton-fp8-mma", *EMU},
}

# (scheme, platform) -> (chosen kernel, fallback), written out by hand.
W_ONLY = {"w_mxfp4", "w_mxfp6_e3m2", "w_mxfp6_e2m3", "w_mxfp8_e4m3"}
DOT = {"w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp8_e4m3", "w_mxfp8_e4m3_a_mxfp8_e4m3"}
NATIVE_MM = {"w_mxfp4_a_mxfp4", "w_mxfp8_e4m3_a_mxfp8_e4m3", "w_mxfp4_floor_a_mxfp4_floor",
             "w_mxfp4_floor_a_mxfp4_rceil", "w_mxfp8_e4m3_floor_a_mxfp8_e4m3_floor",
             "w_mxfp8_e4m3_floor_a_mxfp8_e4m3_rceil"}


def expected(scheme: str, platform: str) -> tuple[str, bool]:
    if platform in ("cpu", "xpu"):
        return ("dequant-weight-only" if scheme in W_ONLY else "reference-emulation"), False
    if platform == "cuda:sm100":
        if scheme in NATIVE_MM:
            return "scaled-mm-mx", False
        if scheme in DOT:
            return "triton-dot-scaled", False  # native on sm100: no fallback
        return "triton-emulation", True  # a native kernel was listed first and refused it
    # sm_90: no MX MMA; triton-emulation measured fastest at every M (docs/benchmarks.md)
    return "triton-emulation", False


def test_shipped_schemes_are_the_table():
    assert set(ACCEPTS) == set(ALL)


@pytest.mark.parametrize("scheme,kernel",
                         list(itertools.product(ALL, [d.name for d in decls.KERNELS])))
def test_acceptance_matrix(scheme, kernel):
    ok, why = accepts(decls.KERNELS_BY_NAME[kernel], CATALOG.schemes[scheme].contract)
    assert ok == (kernel in ACCEPTS[scheme]), why
    assert why


@pytest.mark.parametrize("scheme,platform",
                         list(itertools.product(ALL, ["cpu", "cuda:sm90", "cuda:sm100", "xpu"])))
def test_resolution_table(scheme, platform):
    res = resolve(CATALOG.schemes[scheme], platform)
    assert (res.kernel, res.fallback) == expected(scheme, platform)
    names = [c.kernel for c in res.candidates]
    plat = Platform.parse(platform)
    assert names == [d.name for d in decls.candidates_for(plat)]
    assert sum(c.accepted for c in res.candidates) == 1
    for c in res.candidates:
        assert c.reason  # every candidate says why


def test_resolution_json_shape():
    res = resolve(CATALOG.get("mxfp4"), "cuda:sm90").to_dict()
    assert {"scheme", "platform", "weight", "activation", "kernel", "fallback",
            "candidates"} <= set(res)
    assert res["activation"] == "mxfp4:e8m0/b32:even:dynamic"
    assert all(set(c) >= {"kernel", "accepted", "reason"} for c in res["candidates"])
    json.dumps(res)


def test_strict_turns_fallback_into_error(monkeypatch):
    scheme = CATALOG.schemes["w_mxfp6_e3m2_a_mxfp6_e3m2"]
    with pytest.raises(ResolutionError, match="strict mode.*scaled-mm-mx"):
        resolve(scheme, "cuda:sm100", strict=True)
    monkeypatch.setenv("REGISTRY_STRICT", "1")
    with pytest.raises(ResolutionError, match="strict mode"):
        resolve(scheme, "cuda:sm100")
    assert resolve(scheme, "cuda:sm90").kernel == "triton-emulation"  # not a fallback there


def test_disable_and_force(monkeypatch):
    s = CATALOG.schemes["w_mxfp4_a_mxfp4"]
    res = resolve(s, "cuda:sm90", disabled=["triton-emulation"])
    assert res.kernel == "triton-dot-scaled"
    assert "disabled" in res.candidates[0].reason
    monkeypatch.setenv("REGISTRY_DISABLED_KERNELS", "triton-dot-scaled, triton-emulation")
    assert resolve(s, "cuda:sm90").kernel == "reference-emulation"
    monkeypatch.delenv("REGISTRY_DISABLED_KERNELS")
    res = resolve(s, "cuda:sm90", force="reference-emulation")
    assert res.kernel == "reference-emulation" and res.forced
    with pytest.raises(ResolutionError, match="forced"):
        resolve(s, "cuda:sm90", force="reference-emulation", strict=True)
    with pytest.raises(ValueError, match="unknown kernel 'nope' in disabled=; known kernels"):
        resolve(s, "cuda:sm90", disabled=["nope"])


def test_a_bad_force_names_force_not_disable():
    s = CATALOG.schemes["w_mxfp4_a_mxfp4"]
    for bad in ("nope", ""):  # force="" was silently no force at all
        with pytest.raises(ValueError, match=f"^unknown kernel '{bad}' in force=; known kernels: "
                                             "scaled-mm-mx, ") as e:
            resolve(s, "cuda:sm90", force=bad)
        assert "disable" not in str(e.value)


def test_shape_limits():
    s = CATALOG.schemes["w_mxfp4_a_mxfp4"]
    res = resolve(s, "cuda:sm100", shape=(4096, 4160))  # K % 128 != 0
    assert res.kernel == "triton-dot-scaled"
    assert "not a multiple of 128" in res.candidates[0].reason


# --- (a) an activation key the dispatcher does not know ----------------------------------------

UNKNOWN_ACT = QuantKey(format="fp8_e4m3",
                       scale=ScaleDesc(format="fp32", granularity="token", static=False))


def test_unknown_activation_key_resolves_nowhere():
    contract = SchemeContract(weight=CATALOG.schemes["w_mxfp4"].weight, activation=UNKNOWN_ACT)
    for platform in ("cpu", "cuda:sm90", "cuda:sm100", "rocm:gfx950"):
        with pytest.raises(ResolutionError) as e:
            resolve(contract, platform)
        assert "fp8_e4m3:fp32/token:dynamic not implemented" in str(e.value)


# --- (b) a W4A4 contract never reaches a weight-only kernel ------------------------------------

@pytest.mark.parametrize("scheme", sorted(s for s in ALL if CATALOG.schemes[s].activation))
def test_quantized_activations_never_resolve_weight_only(scheme, monkeypatch):
    s = CATALOG.schemes[scheme]
    with pytest.raises(ResolutionError, match="weight-only"):
        resolve(s, "cpu", force="dequant-weight-only")
    # whatever the priority order, the weight-only kernel is never chosen
    names = ["dequant-weight-only", "reference-emulation", "triton-emulation"]
    for perm in itertools.permutations(names):
        monkeypatch.setattr(decls, "PRIORITY", (("*", perm),))
        assert resolve(s, "cuda:sm90").kernel != "dequant-weight-only"


def test_weight_only_contract_rejected_by_true_w4a4_kernel():
    ok, why = accepts(decls.KERNELS_BY_NAME["scaled-mm-mx"], CATALOG.schemes["w_mxfp4"].contract)
    assert not ok and "weight-only contract (activation none) not implemented" in why


# --- (c) static MX activation keys are refused everywhere ---------------------------------------

def test_static_mx_activation_rejected():
    static_key = QuantKey.mx("mxfp4", rounding="even", static=True)
    with pytest.raises(ValueError, match="static MX activation scales are not supported"):
        SchemeContract(weight=static_key, activation=static_key)
    for decl in decls.KERNELS:
        for fam in decl.accepts:
            assert not any(a is not None and a.is_mx and a.static for a in fam.activations)


def test_declarations_are_torch_free():
    import subprocess
    import sys

    code = ("import sys, kernels.select.declarations, kernels.select.resolve, registry.resolve;"
            "bad=[m for m in sys.modules if m.split('.')[0] in ('torch','triton')];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_family_platforms_narrow_a_kernel():
    """MXFP4 _scaled_mm runs on sm_100/sm_103 only: on sm_120 W4A4 goes to dot_scaled."""
    w4a4 = CATALOG.schemes["w_mxfp4_a_mxfp4"]
    res = resolve(w4a4, "cuda:sm120")
    assert res.kernel == "triton-dot-scaled"
    assert "only on cuda:sm100, cuda:sm103, not cuda:sm120" in res.candidates[0].reason
    assert resolve(CATALOG.schemes["w_mxfp8_e4m3_a_mxfp8_e4m3"], "cuda:sm120").kernel == \
        "scaled-mm-mx"


# --- one-line errors stay readable: each candidate's reason is cut, the Resolution keeps it -----

def _every_error(platforms=KNOWN_PLATFORMS):
    """(message, resolution) of every refusal with the shipped kernels: each platform, each set
    of disabled kernels, strict or not."""
    from kernels.select.kernel_table import kernel_table

    names = kernel_table().names_of("linear")  # the moe / qdq kernels: test_one_chooser.py
    offs = [off for r in range(len(names) + 1) for off in itertools.combinations(names, r)]
    for plat, off, strict, s in itertools.product(platforms, offs, (False, True), CATALOG):
        try:
            resolve(s, plat, strict=strict, disabled=off)
        except ResolutionError as e:
            yield str(e), e.resolution


def test_cut_reason_cuts_before_an_open_detail_else_at_a_word():
    from kernels.select.resolve import REASON_CHARS, cut_reason

    short = "does not run on cpu (runs on cuda:sm90+)"
    assert cut_reason(short) == short
    takes = "activation mxfp6_e2m3:e8m0/b32:even:dynamic not implemented (takes " + "x|" * 40 + ")"
    assert cut_reason(takes) == "activation mxfp6_e2m3:e8m0/b32:even:dynamic not implemented..."
    words = "this kernel is weight-only and would run the layer unquantized " * 3
    got = cut_reason(words)
    assert len(got) <= REASON_CHARS and got.endswith("...") and words.startswith(got[:-3])
    assert got[:-3] + " " in words  # a whole word, not a piece of one


def test_resolve_errors_are_one_short_line_and_the_resolution_keeps_every_reason():
    from kernels.select.resolve import REASON_CHARS

    worst = {"no kernel": 0, "strict": 0}
    cut_somewhere = False
    for message, res in _every_error():
        assert "\n" not in message
        kind = "strict" if message.startswith("strict mode") else "no kernel"
        worst[kind] = max(worst[kind], len(message))
        for c in res.candidates:  # every reason whole in the Resolution (and so in --json)
            assert c.reason and not c.reason.endswith("...")
            if len(c.reason) > REASON_CHARS:
                cut_somewhere = True
                assert c.reason not in message  # shown cut in the line
    assert cut_somewhere  # else this test proves nothing
    # Uncut, both kinds passed 550 characters (the strict one 700+ before the rewording):
    # cuda:sm90 with the emulations disabled; strict with a fallback and a disabled kernel.
    # (+20 for the longest scheme name, w_mxfp8_e4m3_floor_a_mxfp8_e4m3_rceil, named twice)
    assert worst["no kernel"] <= 440, worst
    assert worst["strict"] <= 460, worst


def test_every_kernel_disabled_is_a_short_line_naming_them_together():
    from kernels.select.kernel_table import kernel_table

    names = [d.name for d in kernel_table().candidates_for(Platform.parse("cuda:sm100"))]
    with pytest.raises(ResolutionError) as e:
        resolve(CATALOG.get("w_mxfp4_a_mxfp4"), "cuda:sm100", disabled=kernel_table().names)
    msg = str(e.value)
    assert msg == (f"no kernel implements w_mxfp4_a_mxfp4 on cuda:sm100: {', '.join(names)}: "
                   "disabled (--disable / REGISTRY_DISABLED_KERNELS)")
    assert len(e.value.resolution.candidates) == len(names)
