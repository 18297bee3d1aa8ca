"""`registry lint --probe`: run every (scheme, kernel) pair that can run here and prove liveness.

For each pair, on small random data: (1) the kernel's output matches the reference emulation of
the scheme, and (2) for a scheme with an activation key, the output differs from the weight-only
output of the same weights: the declared activation quantization really happened (the vLLM bug
where mxfp6 activation QDQ was silently skipped passes (1) against a wrong oracle, never (2)).
Imports torch and the kernels, so only `--probe` pays for them.

A probe run is recorded (`record_probe`) in a per-user cache, one JSON file per platform, so
that `registry doctor` can say what was verified on this machine, when, and with which torch /
triton / CUDA; reading a record (`read_record`) imports no torch.
"""
from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from kernels.select.resolve import accepts
from kernels.spec.platform import Platform, detect
from registry.errors import Finding, error
from registry.files.catalog import Catalog
from registry.settings import registry_version

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
    from kernels.select.kernel_table import candidates_for, kernel_decls

    names = [d.name for d in candidates_for(plat)]
    names += [d.name for d in kernel_decls()
              if interpreted_here(d.name, plat) and d.name not in names]
    return names


def interpreted_here(kernel: str, plat: Platform) -> bool:
    """A Triton kernel on the CPU under TRITON_INTERPRET=1: it runs, in the interpreter."""
    return (plat.vendor == "cpu" and kernel.startswith("triton-")
            and os.environ.get("TRITON_INTERPRET") == "1")


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
        weight_only = None
        if scheme.activation is not None:  # the same weights, the activation left as is
            # the qdq kernel by name: it runs as is, no choice (strict mode refuses a forced one)
            w_deq = mx_dequantize(prepared.weight, torch.float32, backend="reference-qdq").cpu()
            weight_only = F.linear(x.cpu().float(), w_deq, b.cpu()).to(x.dtype)
    except Exception as e:  # noqa: BLE001 - a probe reports every failure as a finding
        return ProbeResult(scheme.name, kernel_name, str(plat), False, None, None,
                           f"raised {type(e).__name__}: {e}".replace("\n", " "))
    out = out.cpu()
    if not torch.isfinite(out).all():
        return ProbeResult(scheme.name, kernel_name, str(plat), False, None, None,
                           "output holds NaN/Inf on finite input")
    err = rel(out, ref)
    effect = None if weight_only is None else rel(out, weight_only)
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
              kernels: Iterable[str] | None = None,
              schemes: Iterable[str] | None = None) -> list[ProbeResult]:
    """Every accepted (scheme, kernel) pair runnable here (or of `kernels` x `schemes`, names
    of the catalog's schemes), probed."""
    import torch

    from kernels.select.kernel_table import kernel_by_name

    plat = platform or detect()
    device = "cuda" if plat.vendor in ("cuda", "rocm") else ("xpu" if plat.vendor == "xpu"
                                                             else "cpu")
    names = list(kernels) if kernels else runnable_here(plat)
    wanted = None if schemes is None else set(schemes)
    results = []
    with torch.no_grad():
        for s in sorted(catalog.schemes.values(), key=lambda s: s.name):
            if wanted is not None and s.name not in wanted:
                continue
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


# --- the probe record (read by `registry doctor`) ------------------------------------------------

ENV_CACHE_DIR = "REGISTRY_CACHE_DIR"
RECORD_FORMAT = 1
#: The facts a probe's verdict depends on besides the code it ran; a record made with other
#: values is stale.
VERSION_KEYS = ("registry", "torch", "triton", "cuda", "hip", "device")


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """$REGISTRY_CACHE_DIR, else $XDG_CACHE_HOME/registry, else ~/.cache/registry."""
    env = os.environ if env is None else env
    if env.get(ENV_CACHE_DIR, "").strip():
        return Path(env[ENV_CACHE_DIR].strip()).expanduser()
    if env.get("XDG_CACHE_HOME", "").strip():
        return Path(env["XDG_CACHE_HOME"].strip()).expanduser() / "registry"
    return Path.home() / ".cache" / "registry"


def record_path(plat: Platform, env: Mapping[str, str] | None = None) -> Path:
    """The record of a platform: probe-cuda-sm90.json, probe-cpu.json, ..."""
    return cache_dir(env) / f"probe-{str(plat).replace(':', '-')}.json"


def runtime_versions() -> dict[str, Optional[str]]:
    """registry / torch / triton / CUDA / HIP versions and the device name (None: absent)."""
    out: dict[str, Optional[str]] = {k: None for k in VERSION_KEYS}
    out["registry"] = registry_version()
    try:
        import triton
        out["triton"] = str(triton.__version__)
    except Exception:  # noqa: BLE001 - absent or broken: no version
        pass
    try:
        import torch
    except Exception:  # noqa: BLE001
        return out
    out["torch"] = str(torch.__version__)
    out["cuda"] = torch.version.cuda
    out["hip"] = getattr(torch.version, "hip", None)
    out["device"] = "cpu"
    try:
        if torch.cuda.is_available():
            out["device"] = torch.cuda.get_device_name(0)
        elif hasattr(torch, "xpu") and torch.xpu.is_available():
            out["device"] = torch.xpu.get_device_name(0)
    except Exception as e:  # noqa: BLE001 - a broken driver is a fact, not a crash
        out["device"] = f"unknown ({type(e).__name__})"
    return out


def record_probe(results: list[ProbeResult], plat: Platform,
                 path: Path | None = None) -> Path:
    """Write (merge) a probe run into the platform's record; raises OSError on failure.

    Pairs of an earlier record made with the same versions and device are kept unless this run
    probed them again (a run restricted with --kernels adds to it); a record made with other
    versions is replaced.
    """
    path = path or record_path(plat)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    versions = runtime_versions()
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    old, _ = read_record(plat, path)
    if old is not None and old.get("versions") == versions:
        pairs = {(p["scheme"], p["kernel"]): p for p in old["pairs"]}
    for r in results:
        pairs[(r.scheme, r.kernel)] = {"scheme": r.scheme, "kernel": r.kernel, "ok": r.ok,
                                       "message": r.message, "rel_err": r.rel_err,
                                       "act_effect": r.act_effect, "date": now}
    record = {"format": RECORD_FORMAT, "platform": str(plat), "date": now,
              "versions": versions,
              "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
              "pairs": [pairs[k] for k in sorted(pairs)]}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def read_record(plat: Platform, path: Path | None = None
                ) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """(the platform's record, None), (None, None) when there is none, or (None, a one-line
    problem) when it cannot be read or is not a probe record."""
    path = path or record_path(plat)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return None, f"probe record {path} is unreadable ({type(e).__name__}: {e}); " \
                     "run `registry lint --probe` to write it again"
    ok = (isinstance(data, dict) and data.get("format") == RECORD_FORMAT
          and isinstance(data.get("pairs"), list) and isinstance(data.get("versions"), dict)
          and all(isinstance(p, dict) and {"scheme", "kernel", "ok"} <= set(p)
                  for p in data["pairs"]))
    if not ok:
        return None, (f"probe record {path} is not a format-{RECORD_FORMAT} probe record; run "
                      "`registry lint --probe` to write it again")
    return data, None


def stale_versions(record: Mapping[str, Any],
                   now: Mapping[str, Optional[str]]) -> list[str]:
    """'torch 2.11.0 -> 2.13.0' for each version the record was made with that differs now."""
    was = record.get("versions", {})
    return [f"{k} {was.get(k) or 'none'} -> {now.get(k) or 'none'}" for k in VERSION_KEYS
            if was.get(k) != now.get(k)]
