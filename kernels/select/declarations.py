"""What every kernel implements, as data: read by resolve, lint and `registry matrix`.

Three kinds of kernel, declared alike and chosen by the one resolver (kernels.select.resolve):
- "linear": a layer's matmul; implements contracts (families of weight keys x activation keys,
  `None` meaning weight-only);
- "moe": grouped MoE experts (kernels.moe.MXGroupedExperts); implements contracts as linear;
- "qdq": MX quantize / dequantize / QDQ and the activation-QDQ dispatcher; implements keys (a
  family's `activations`, its `weights` empty).
A kernel is declared here, once: what it implements, the platforms it runs on (and where only
in the Triton interpreter), where it uses native MX hardware, the QDQ kernels it runs inside
itself (`uses`), and its shape / dtype limits. Nothing here imports torch or triton; `impl`
is imported only when the kernel runs.

The per-platform candidate order of each kind is data too (`PRIORITY`, `MOE_PRIORITY`,
`QDQ_PRIORITY`): the first full match wins. Kernel names are one name space over the kinds
(`--disable` / REGISTRY_DISABLED_KERNELS take any of them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY, MX_DYNAMIC_KEYS, mx_keys
from kernels.spec.contract import MX_FORMATS, QuantKey
from kernels.spec.platform import Platform, check_requirement

__all__ = ["KINDS", "Family", "Limits", "KernelDecl", "ALL_MX_WEIGHTS", "DOT_SCALED_FORMATS",
           "FP8_FORMATS", "WEIGHT_ONLY", "NO_WEIGHTS", "QDQ_KERNELS", "DISPATCH_KEYS", "KERNELS",
           "MOE_KERNELS", "ALL_KERNELS", "KERNELS_BY_NAME", "PRIORITY", "MOE_PRIORITY",
           "QDQ_PRIORITY", "candidates_for", "kernels_of_kind"]

#: The kinds of kernel resolve chooses (KernelDecl.kind).
KINDS: tuple[str, ...] = ("linear", "moe", "qdq")

ActKey = "QuantKey | None"


@dataclass(frozen=True)
class Family:
    """A block of contracts: every weight key here with every activation key here."""

    weights: frozenset[QuantKey]  # empty for a qdq kernel (it implements keys, not contracts)
    activations: frozenset  # of QuantKey | None (None: weight-only); a qdq kernel's keys
    note: str  # one line, shown in reasons: what this family is
    platforms: tuple[str, ...] = ("*",)  # narrower than the kernel's own, where a family needs it

    def runs_on(self, platform: Platform) -> bool:
        return any(platform.matches(r) for r in self.platforms)


@dataclass(frozen=True)
class Limits:
    """Shape / dtype limits checked by `can_implement` (K is the reduction axis)."""

    k_multiple: int = 32
    n_multiple: int = 1
    act_dtypes: tuple[str, ...] = ("bfloat16", "float16", "float32")


@dataclass(frozen=True)
class KernelDecl:
    name: str
    summary: str
    impl: str  # "module:Class", imported lazily
    platforms: tuple[str, ...]  # requirement strings (kernels.spec.platform.Platform.matches)
    native_on: tuple[str, ...]  # where it runs on MX hardware; elsewhere it is emulated
    accepts: tuple[Family, ...]
    limits: Limits = field(default_factory=Limits)
    # Platforms its results were checked on real hardware (`registry lint --probe` and the
    # kernel tests; docs/verification.md); the matrix marks the rest "not verified on hardware".
    verified_on: tuple[str, ...] = ()
    kind: str = "linear"  # one of KINDS
    # QDQ kernels whose code this kernel runs inside itself: disabling one refuses this one.
    uses: tuple[str, ...] = ()
    # Platforms where it runs only in Triton's CPU interpreter (TRITON_INTERPRET=1).
    interpreted_on: tuple[str, ...] = ()
    # The short name `backend=` forces it by (qdq / moe: "triton", "reference"); None: none.
    backend: Optional[str] = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kernel {self.name!r}: kind {self.kind!r} is not one of "
                             f"{', '.join(KINDS)}")
        fam_platforms = tuple(r for f in self.accepts for r in f.platforms)
        for req in (self.platforms + self.native_on + self.verified_on + fam_platforms
                    + self.interpreted_on):
            check_requirement(req)

    def check_limits(self, in_features: int, out_features: int,
                     act_dtype: object = None) -> tuple[bool, str]:
        """The declared shape / dtype limits as (ok, reason); act_dtype a torch dtype or name."""
        lim = self.limits
        if in_features % lim.k_multiple:
            return False, f"in_features {in_features} is not a multiple of {lim.k_multiple}"
        if out_features % lim.n_multiple:
            return False, f"out_features {out_features} is not a multiple of {lim.n_multiple}"
        if act_dtype is not None:
            name = str(act_dtype).removeprefix("torch.")
            if name not in lim.act_dtypes:
                return False, f"activation dtype {name} is not one of {', '.join(lim.act_dtypes)}"
        return True, "fits the shape and dtype limits"

    def runs_on(self, platform: Platform) -> bool:
        return any(platform.matches(r) for r in self.platforms)

    def interpreted_on_platform(self, platform: Platform) -> bool:
        """Whether it runs on `platform` only in the Triton interpreter."""
        return any(platform.matches(r) for r in self.interpreted_on)

    def implements(self, contract) -> bool:
        """Whether one declared family holds both of the contract's keys (a qdq kernel: the
        key) on any platform."""
        if self.kind == "qdq":
            return any(contract in f.activations for f in self.accepts)
        return any(contract.weight in f.weights and contract.activation in f.activations
                   for f in self.accepts)

    @property
    def keys(self) -> frozenset:
        """Every key a qdq kernel implements (the activations of its families)."""
        return frozenset().union(*(f.activations for f in self.accepts))

    def is_native_on(self, platform: Platform) -> bool:
        return any(platform.matches(r) for r in self.native_on)

    def is_verified_on(self, platform: Platform) -> bool:
        return any(platform.matches(r) for r in self.verified_on)


ALL_MX_WEIGHTS = mx_keys(MX_FORMATS, static=True)
DOT_SCALED_FORMATS = ("mxfp4", "mxfp8_e4m3", "mxfp8_e5m2")  # what tl.dot_scaled can express
FP8_FORMATS = ("mxfp8_e4m3", "mxfp8_e5m2")
WEIGHT_ONLY = frozenset({None})
NO_WEIGHTS: frozenset[QuantKey] = frozenset()

# --- qdq: quantize / dequantize / QDQ (kernels.mx, the activation-QDQ dispatcher) -------------
# A bare format and rounding (mx_quantize(x, "mxfp4", "even")) is asked as the dynamic MX key:
# quantizing computes each block's scale from the data, which is what that key names. The fp8
# per-tensor key is one torch cast by a given scale (kernels.reference.fp8_tensor), run by both.

QDQ_KERNELS: tuple[KernelDecl, ...] = (
    KernelDecl(
        name="triton-qdq",
        summary="Triton MX quantize / dequantize / QDQ kernels (kernels/triton/mx_quant.py)",
        impl="kernels.triton.mx_quant",  # a module with quantize / dequantize / qdq on [R, K]
        platforms=("cuda:*", "rocm:*"),
        native_on=(),
        accepts=(
            Family(NO_WEIGHTS, MX_DYNAMIC_KEYS, "every MX format x rounding (Triton kernels)"),
            Family(NO_WEIGHTS, frozenset({FP8_STATIC_TENSOR_KEY}),
                   "fp8_e4m3 per tensor, static scale (the shared torch cast)"),
        ),
        verified_on=("cuda:sm90",),
        kind="qdq",
        interpreted_on=("cpu",),
        backend="triton",
    ),
    KernelDecl(
        name="reference-qdq",
        summary="pure torch MX quantize / dequantize / QDQ (kernels/reference/mx.py), any device",
        impl="kernels.reference.mx",
        platforms=("*",),
        native_on=(),
        accepts=(
            Family(NO_WEIGHTS, MX_DYNAMIC_KEYS, "every MX format x rounding (torch)"),
            Family(NO_WEIGHTS, frozenset({FP8_STATIC_TENSOR_KEY}),
                   "fp8_e4m3 per tensor, static scale (the shared torch cast)"),
        ),
        verified_on=("cpu", "cuda:sm90"),
        kind="qdq",
        backend="reference",
    ),
)

#: Every activation key the dispatcher can quantize-dequantize: what the QDQ kernels declare
#: (kernels.select.activation_keys re-exports it; lint and kernels.dispatch read it there).
DISPATCH_KEYS: frozenset[QuantKey] = frozenset().union(*(d.keys for d in QDQ_KERNELS))

# --- linear ----------------------------------------------------------------------------------

KERNELS: tuple[KernelDecl, ...] = (
    KernelDecl(
        name="scaled-mm-mx",
        summary="torch._scaled_mm with MX block scales (cuBLAS, tensor cores)",
        impl="kernels.native.scaled_mm_mx:ScaledMMMXLinear",
        platforms=("cuda:sm100+",),
        native_on=("cuda:sm100+",),
        accepts=(
            Family(mx_keys(["mxfp8_e4m3"], static=True),
                   mx_keys(["mxfp8_e4m3"], static=False), "W8A8 mxfp8_e4m3 x mxfp8_e4m3"),
            # PyTorch runs MXFP4 _scaled_mm on B200/B300 (sm_100/sm_103) only, not on sm_120
            Family(mx_keys(["mxfp4"], static=True),
                   mx_keys(["mxfp4"], static=False), "W4A4 mxfp4 x mxfp4",
                   platforms=("cuda:sm100", "cuda:sm103")),
        ),
        limits=Limits(k_multiple=128, n_multiple=16, act_dtypes=("bfloat16",)),
    ),
    KernelDecl(
        name="triton-dot-scaled",
        summary="Triton tl.dot_scaled: mxfp4/mxfp8 weights, bf16 or mxfp4/mxfp8 activations",
        impl="kernels.triton.linear_dot_scaled:DotScaledLinear",
        platforms=("cuda:sm90+", "rocm:gfx942", "rocm:gfx950"),
        native_on=("cuda:sm100+", "rocm:gfx950"),
        accepts=(
            Family(mx_keys(DOT_SCALED_FORMATS, static=True),
                   mx_keys(DOT_SCALED_FORMATS, static=False) | WEIGHT_ONLY,
                   "mxfp4/mxfp8 weights x bf16, mxfp4 or mxfp8 activations"),
        ),
        limits=Limits(k_multiple=64, act_dtypes=("bfloat16", "float16")),
        verified_on=("cuda:sm90",),
        uses=("triton-qdq",),
    ),
    KernelDecl(
        name="triton-fp8-mma",
        summary="Triton fp8 tensor-core MMA per 32-wide K slice, E8M0 scales on the fp32 "
                "accumulator (MXFP8 x MXFP8 where the MMA has no block scales)",
        impl="kernels.triton.linear_fp8_mma:FP8MMALinear",
        platforms=("cuda:sm89", "cuda:sm90"),
        native_on=(),
        accepts=(
            Family(mx_keys(FP8_FORMATS, static=True), mx_keys(FP8_FORMATS, static=False),
                   "W8A8 mxfp8 x mxfp8 (e4m3 / e5m2)"),
        ),
        verified_on=("cuda:sm90",),
        uses=("triton-qdq",),
    ),
    KernelDecl(
        name="triton-emulation",
        summary="one fused Triton kernel: weight dequant + activation QDQ + matmul",
        impl="kernels.triton.linear_emulation:TritonEmulationLinear",
        platforms=("cuda:sm80+", "rocm:*"),
        native_on=(),
        accepts=(
            Family(ALL_MX_WEIGHTS, DISPATCH_KEYS | WEIGHT_ONLY,
                   "every MX weight x every activation key the dispatcher knows"),
        ),
        verified_on=("cuda:sm90",),
        uses=("triton-qdq",),
    ),
    KernelDecl(
        name="dequant-weight-only",
        summary="weight-only: dequantize the weight once at preparation, then F.linear",
        impl="kernels.reference.linear:DequantWeightOnlyLinear",
        platforms=("*",),
        native_on=(),
        accepts=(Family(ALL_MX_WEIGHTS, WEIGHT_ONLY, "weight-only (activation none)"),),
        verified_on=("cpu", "cuda:sm90"),
    ),
    KernelDecl(
        name="reference-emulation",
        summary="pure torch: dispatcher QDQ of the activation, dequantized weight, F.linear",
        impl="kernels.reference.linear:ReferenceEmulationLinear",
        platforms=("*",),
        native_on=(),
        accepts=(
            Family(ALL_MX_WEIGHTS, DISPATCH_KEYS | WEIGHT_ONLY,
                   "every MX weight x every activation key the dispatcher knows"),
        ),
        verified_on=("cpu", "cuda:sm90"),
        uses=("reference-qdq",),
    ),
)

# --- moe: grouped experts (kernels.moe.MXGroupedExperts) -------------------------------------
# reference-moe quantizes activations through the QDQ choice (the dispatcher with the layer's
# resolved qdq kernel); triton-moe runs triton-qdq's jit helpers inside its one launch.

MOE_KERNELS: tuple[KernelDecl, ...] = (
    KernelDecl(
        name="triton-moe",
        summary="one grouped Triton launch: activation QDQ + weight dequant + dot + routing "
                "weight (kernels/triton/moe_grouped.py)",
        impl="kernels.triton.moe_grouped:grouped_experts_triton",
        platforms=("cuda:sm80+", "rocm:*"),
        native_on=(),
        accepts=(
            Family(ALL_MX_WEIGHTS, DISPATCH_KEYS | WEIGHT_ONLY,
                   "every MX weight x every activation key the dispatcher knows"),
        ),
        verified_on=("cuda:sm90",),
        kind="moe",
        uses=("triton-qdq",),
        interpreted_on=("cpu",),
        backend="triton",
    ),
    KernelDecl(
        name="reference-moe",
        summary="pure torch grouped experts: the dispatcher's QDQ, dequantized experts, "
                "F.linear per expert (kernels/reference/moe.py)",
        impl="kernels.reference.moe:grouped_experts_reference",
        platforms=("*",),
        native_on=(),
        accepts=(
            Family(ALL_MX_WEIGHTS, DISPATCH_KEYS | WEIGHT_ONLY,
                   "every MX weight x every activation key the dispatcher knows"),
        ),
        verified_on=("cpu", "cuda:sm90"),
        kind="moe",
        uses=("reference-qdq",),  # its weight dequantization
        backend="reference",
    ),
)

#: Every built-in kernel, all kinds.
ALL_KERNELS: tuple[KernelDecl, ...] = KERNELS + MOE_KERNELS + QDQ_KERNELS

KERNELS_BY_NAME: dict[str, KernelDecl] = {k.name: k for k in ALL_KERNELS}

#: Candidate order per platform: the first requirement matching the platform gives the order.
PRIORITY: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cuda:sm100+", ("scaled-mm-mx", "triton-dot-scaled", "triton-emulation",
                     "dequant-weight-only", "reference-emulation")),
    # sm_90 (H200, docs/benchmarks.md): triton-emulation's decode / dequant-gemm strategies beat
    # tl.dot_scaled (no MX MMA on Hopper) at every M, and triton-fp8-mma (0.2x bf16) too.
    ("cuda:*", ("triton-emulation", "triton-dot-scaled", "triton-fp8-mma",
                "dequant-weight-only", "reference-emulation")),
    ("rocm:*", ("triton-dot-scaled", "triton-emulation", "dequant-weight-only",
                "reference-emulation")),
    ("*", ("dequant-weight-only", "reference-emulation")),
)
MOE_PRIORITY: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cuda:*", ("triton-moe", "reference-moe")),
    ("rocm:*", ("triton-moe", "reference-moe")),
    ("*", ("reference-moe",)),  # triton-moe runs in the CPU interpreter only when forced
)
QDQ_PRIORITY: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cuda:*", ("triton-qdq", "reference-qdq")),
    ("rocm:*", ("triton-qdq", "reference-qdq")),
    ("*", ("reference-qdq",)),  # triton-qdq runs in the CPU interpreter only when forced
)


def kernels_of_kind(kind: str) -> tuple[KernelDecl, ...]:
    """The built-in declarations of one kind (ValueError naming the kinds for another)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kernel kind {kind!r}; kinds: {', '.join(KINDS)}")
    return tuple(d for d in ALL_KERNELS if d.kind == kind)


def candidates_for(platform: Platform, kind: str = "linear") -> tuple[KernelDecl, ...]:
    """The ordered candidate list of a platform for one kind of kernel."""
    kernels_of_kind(kind)  # checks the kind
    orders = {"linear": PRIORITY, "moe": MOE_PRIORITY, "qdq": QDQ_PRIORITY}[kind]
    for requirement, names in orders:
        if platform.matches(requirement):
            return tuple(KERNELS_BY_NAME[n] for n in names)
    return ()


def _check_builtin() -> None:
    """Each order names kernels of its kind; each `uses` names a qdq kernel."""
    for kind, orders in (("linear", PRIORITY), ("moe", MOE_PRIORITY), ("qdq", QDQ_PRIORITY)):
        for _, names in orders:
            assert all(KERNELS_BY_NAME[n].kind == kind for n in names), (kind, names)
    for d in ALL_KERNELS:
        assert all(KERNELS_BY_NAME[u].kind == "qdq" for u in d.uses), d.name


_check_builtin()
