"""`registry lint --probe`: run every (scheme, kernel) pair that can run here and prove liveness.

For each pair, on small random data: (1) the kernel's output matches the reference emulation of
the scheme, and (2) for a scheme with an activation key, the output differs from the weight-only
output of the same weights: the declared activation quantization really happened (the vLLM bug
where mxfp6 activation QDQ was silently skipped passes (1) against a wrong oracle, never (2)).
Imports torch and the kernels, so only `--probe` pays for them.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Iterable, Optional

from registry.catalog import Catalog
from registry.errors import Finding, error
from registry.platform import Platform, detect
from registry.resolve import accepts

# One bf16 ulp (2^-8) bounds a kernel's norm-wise error against the fp32-accumulated oracle
# rounded to bf16: both see the same operands, only the summation order differs.
MATCH_TOL = 2.0**-8
# The activation QDQ must move the output by clearly more than a kernel's own error may
# (fp8 per-tensor, the gentlest key, moves it by about 2e-2 on the probe's data).
DIFFER_MIN = 2 * MATCH_TOL
M, N, K = 7, 32, 256  # K a multiple of every kernel's k_multiple (128), N of n_multiple (16)


@dataclass(frozen=True)
class ProbeResult:
    scheme: str
    kernel: str
    platform: str
    ok: bool
    rel_err: Optional[float]  # ‖kernel − reference‖ / ‖reference‖
    act_effect: Optional[float]  # ‖kernel − weight-only reference‖ / ‖weight-only reference‖
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


def runnable_here(plat: Platform) -> list[str]:
    """Kernels listed for this platform; on CPU, Triton ones too when TRITON_INTERPRET=1."""
    from kernels.kernel_table import candidates_for, kernel_decls

    names = [d.name for d in candidates_for(plat)]
    if plat.vendor == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        names += [d.name for d in kernel_decls()
                  if d.name.startswith("triton-") and d.name not in names]
    return names


def _inputs(device, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    w = torch.randn(N, K, generator=g) * torch.exp2(torch.randint(-4, 4, (N, 1), generator=g))
    x = torch.randn(M, K, generator=g)
    # one outlier per 32-block makes block-scaled activation quantization coarse and visible
    x[:, ::32] *= 40.0
    b = torch.randn(N, generator=g)
    return w.to(device), x.to(device=device, dtype=torch.bfloat16), b.to(device)


def probe_pair(scheme, kernel_name: str, plat: Platform, device, seed: int = 0) -> ProbeResult:
    import torch
    import torch.nn.functional as F

    from kernels.base import load_kernel
    from kernels.mx import mx_dequantize

    def rel(a, b) -> float:
        return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))

    w, x, b = _inputs(device, seed)
    static = scheme.activation is not None and scheme.activation.static
    try:
        kernel = load_kernel(kernel_name)
        prepared = kernel.prepare(w, scheme.contract, calibration=x if static else None)
        out = kernel.apply(x, prepared, b)
        ref_kernel = load_kernel("reference-emulation")
        ref = ref_kernel.apply(x.cpu(), _to_cpu(prepared), b.cpu())
    except Exception as e:  # noqa: BLE001 - a probe reports every failure as a finding
        return ProbeResult(scheme.name, kernel_name, str(plat), False, None, None,
                           f"raised {type(e).__name__}: {e}".replace("\n", " "))
    out = out.cpu()
    if not torch.isfinite(out).all():
        return ProbeResult(scheme.name, kernel_name, str(plat), False, None, None,
                           "output holds NaN/Inf on finite input")
    err = rel(out, ref)
    effect = None
    if scheme.activation is not None:
        w_deq = mx_dequantize(prepared.weight, torch.float32, backend="reference").cpu()
        weight_only = F.linear(x.cpu().float(), w_deq, b.cpu()).to(x.dtype)
        effect = rel(out, weight_only)
    if err > MATCH_TOL:
        msg = f"output differs from the reference emulation: rel err {err:.2e} > {MATCH_TOL:.2e}"
    elif effect is not None and effect < max(DIFFER_MIN, 10 * err):
        msg = (f"activation quantization ({scheme.activation}) did not happen: output is within "
               f"{effect:.2e} of the weight-only output")
    else:
        msg = "ok"
    return ProbeResult(scheme.name, kernel_name, str(plat), msg == "ok", err, effect, msg)


def _to_cpu(prepared):
    """The prepared weight on the CPU, for the reference run (its cache stays behind)."""
    from kernels.base import PreparedWeight

    wt = prepared.weight.to("cpu")
    scale = None if prepared.act_scale is None else prepared.act_scale.cpu()
    return PreparedWeight(wt, prepared.contract, scale)


def run_probe(catalog: Catalog, platform: Platform | None = None,
              kernels: Iterable[str] | None = None) -> list[ProbeResult]:
    """Every accepted (scheme, kernel) pair runnable here, probed."""
    import torch

    from kernels.kernel_table import kernel_by_name

    plat = platform or detect()
    device = "cuda" if plat.vendor in ("cuda", "rocm") else ("xpu" if plat.vendor == "xpu"
                                                             else "cpu")
    names = list(kernels) if kernels else runnable_here(plat)
    results = []
    with torch.no_grad():
        for s in sorted(catalog.schemes.values(), key=lambda s: s.name):
            for n in names:
                decl = kernel_by_name(n)
                if accepts(decl, s.contract, plat)[0]:
                    results.append(probe_pair(s, n, plat, device, seed=len(results)))
    return results


def probe_findings(catalog: Catalog, results: list[ProbeResult]) -> list[Finding]:
    out = []
    for r in results:
        if not r.ok:
            s = catalog.schemes[r.scheme]
            out.append(error(str(s.source), s.line("activation"), "probe",
                             f"{r.kernel} on {r.platform}: {r.message}"))
    return out
