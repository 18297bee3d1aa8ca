"""What every linear kernel implements, as data: read by resolve, lint and `registry matrix`.

A kernel is declared here, once: the contracts it implements (families of weight keys x
activation keys, `None` meaning weight-only), the platforms it runs on, where it uses native MX
hardware, and its shape / dtype limits. Nothing here imports torch or triton; the
implementation class named by `impl` is imported only when a layer is built.

The per-platform candidate order is data too (`PRIORITY`): the first full match wins.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kernels.select.activation_keys import DISPATCH_KEYS, mx_keys
from kernels.spec.contract import MX_FORMATS, QuantKey
from kernels.spec.platform import Platform, check_requirement

__all__ = ["Family", "Limits", "KernelDecl", "ALL_MX_WEIGHTS", "DOT_SCALED_FORMATS", "FP8_FORMATS",
           "WEIGHT_ONLY", "KERNELS", "KERNELS_BY_NAME", "PRIORITY", "candidates_for"]

ActKey = "QuantKey | None"


@dataclass(frozen=True)
class Family:
    """A block of contracts: every weight key here with every activation key here."""

    weights: frozenset[QuantKey]
    activations: frozenset  # of QuantKey | None (None: weight-only)
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

    def __post_init__(self) -> None:
        fam_platforms = tuple(r for f in self.accepts for r in f.platforms)
        for req in self.platforms + self.native_on + self.verified_on + fam_platforms:
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

    def implements(self, contract) -> bool:
        """Whether one declared family holds both of the contract's keys (any platform)."""
        return any(contract.weight in f.weights and contract.activation in f.activations
                   for f in self.accepts)

    def is_native_on(self, platform: Platform) -> bool:
        return any(platform.matches(r) for r in self.native_on)

    def is_verified_on(self, platform: Platform) -> bool:
        return any(platform.matches(r) for r in self.verified_on)


ALL_MX_WEIGHTS = mx_keys(MX_FORMATS, static=True)
DOT_SCALED_FORMATS = ("mxfp4", "mxfp8_e4m3", "mxfp8_e5m2")  # what tl.dot_scaled can express
FP8_FORMATS = ("mxfp8_e4m3", "mxfp8_e5m2")
WEIGHT_ONLY = frozenset({None})

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
    ),
)

KERNELS_BY_NAME: dict[str, KernelDecl] = {k.name: k for k in KERNELS}

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


def candidates_for(platform: Platform) -> tuple[KernelDecl, ...]:
    """The ordered candidate list of a platform."""
    for requirement, names in PRIORITY:
        if platform.matches(requirement):
            return tuple(KERNELS_BY_NAME[n] for n in names)
    return ()
