"""Choosing a kernel, as data: what each kernel accepts and the one resolver that reads it.

    activation_keys  the activation key families the QDQ dispatcher serves (data)
    declarations     the built-in kernel declarations of every kind (linear, moe, qdq: KernelDecl,
                     Family) and each kind's per-platform order
    acceptance       whether a kernel's declared families hold a contract / key, and why
    kernel_table     built-in declarations merged with `registry.kernels` entry-point plugins
    resolve          contract / key + platform + kind -> the kernel, every candidate's reason,
                     deviations; `resolve_cached` for per-call choices (kernels.choice)

Nothing here imports torch or triton (a kernel's implementation is imported only when it runs,
by kernels.base.load_kernel / kernel_table.load_impl), nor the `registry` package: resolve takes
a `SchemeContract`, anything carrying one in `.contract` (kernels.spec.contract.HasContract),
or (kind "qdq") a `QuantKey`.
"""
