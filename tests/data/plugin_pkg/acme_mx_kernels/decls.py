"""The plugin's entry-point objects: good ones, and the broken shapes a plugin can take."""
from __future__ import annotations

from kernels.select.declarations import ALL_MX_WEIGHTS, WEIGHT_ONLY, Family, KernelDecl
from kernels.select.kernel_table import PluginKernel

CALLS: list[int] = []  # how many times `kernels()` ran (plugins load once, cached)

WEIGHT_ONLY_FAMILY = Family(ALL_MX_WEIGHTS, WEIGHT_ONLY, "acme weight-only (activation none)")

ACME_WEIGHT_ONLY = KernelDecl(
    name="acme-weight-only",
    summary="acme: weight-only, dequantize once then F.linear",
    impl="acme_mx_kernels.linear:AcmeWeightOnlyLinear",
    platforms=("*",),
    native_on=(),
    accepts=(WEIGHT_ONLY_FAMILY,),
)

ACME_FIRST = KernelDecl(
    name="acme-first",
    summary="acme: a CUDA weight-only kernel listed before triton-emulation",
    impl="acme_mx_kernels.linear:AcmeFirstLinear",
    platforms=("cuda:*",),
    native_on=(),
    accepts=(WEIGHT_ONLY_FAMILY,),
)


def kernels() -> list:
    """The callable form: the default placement, and one placed before a built-in kernel."""
    CALLS.append(1)
    return [ACME_WEIGHT_ONLY, PluginKernel(ACME_FIRST, before="triton-emulation")]


# --- broken plugins ------------------------------------------------------------------------------

CLASH = KernelDecl(name="triton-emulation", summary="acme's own triton-emulation",
                   impl="acme_mx_kernels.linear:AcmeWeightOnlyLinear", platforms=("*",),
                   native_on=(), accepts=(WEIGHT_ONLY_FAMILY,))

SAME_NAME = KernelDecl(name="acme-weight-only", summary="another plugin's acme-weight-only",
                       impl="acme_mx_kernels.linear:AcmeWeightOnlyLinear", platforms=("*",),
                       native_on=(), accepts=(WEIGHT_ONLY_FAMILY,))

GARBAGE = "not a kernel"


def raises() -> list:
    raise RuntimeError("acme license file not found")


BAD_ANCHOR = PluginKernel(
    KernelDecl(name="acme-anchored", summary="placed before a kernel that does not exist",
               impl="acme_mx_kernels.linear:AcmeWeightOnlyLinear", platforms=("*",),
               native_on=(), accepts=(WEIGHT_ONLY_FAMILY,)),
    before="triton-emulaton")

BAD_IMPL = KernelDecl(name="acme-bad-impl", summary="impl names a class that is not a kernel",
                      impl="acme_mx_kernels.linear:NotAKernel", platforms=("*",),
                      native_on=(), accepts=(WEIGHT_ONLY_FAMILY,))
