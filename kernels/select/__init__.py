"""Choosing a kernel, as data: what each kernel accepts and the one resolver that reads it.

    activation_keys  the activation keys the QDQ dispatcher serves (data)
    declarations     the built-in kernel declarations (KernelDecl, Family) and per-platform order
    kernel_table     built-in declarations merged with `registry.kernels` entry-point plugins
    resolve          contract + platform -> the kernel, every candidate's reason, deviations

Nothing here imports torch or triton (a kernel's class is imported only when a layer is built,
by kernels.base.load_kernel), nor the `registry` package: resolve takes a `SchemeContract` or
anything carrying one in `.contract` (kernels.spec.contract.HasContract).
"""
