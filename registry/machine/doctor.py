"""The facts behind `registry doctor`: this machine, its kernels, and what was verified here.

Gathered, never printed (registry/cli/doctor.py prints them): the Python / registry /
torch / triton / CUDA / HIP versions, the GPU, the REGISTRY_* settings in effect, the detected
platform; then one row per kernel (built-in and plugin), grouped by kind (linear, moe, qdq):
listed among this platform's candidates of its kind, runs here now (its implementation imports,
its platforms match) or why not, native or emulated, declared
`verified_on` here, and what the recorded `registry lint --probe` run of this platform said.
Works without torch or triton installed: those are facts too, never tracebacks.
"""
from __future__ import annotations

import dataclasses
import os
import platform as pyplatform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from kernels.spec.platform import Platform, detect, driver_version
from registry.files.catalog import Catalog
from registry.machine.probe import (
    ENV_CACHE_DIR, VERSION_KEYS, interpreted_here, read_record, record_path, runtime_versions,
    stale_versions,
)

#: The settings that change what the registry does, shown with their values.
ENV_SETTINGS: tuple[tuple[str, str], ...] = (
    ("REGISTRY_STRICT", "1: a fallback, forced kernel or disabled kernel that changes what runs is an error"),
    ("REGISTRY_DISABLED_KERNELS", "kernels resolve skips"),
    ("REGISTRY_DISABLE_PLUGINS", "1: load no kernel plugins"),
    ("REGISTRY_SCHEMES_PATH", "extra scheme directories"),
    (ENV_CACHE_DIR, "where `lint --probe` records its results"),
    ("TRITON_INTERPRET", "1: Triton kernels run in the CPU interpreter"),
)
TORCH_MISSING = "every kernel needs torch: nothing can run (pip install torch)"
TRITON_MISSING = ("the triton-* kernels cannot run, on a GPU or in the interpreter "
                  "(pip install triton)")


@dataclass
class KernelFacts:
    name: str
    kind: str  # "linear", "moe" or "qdq" (kernels.select.declarations.KINDS)
    source: str  # "built-in" or "plugin DIST (entry point EP)"
    listed: bool  # a candidate of this platform's priority list of its kind
    disabled: bool  # named in REGISTRY_DISABLED_KERNELS
    runs_here: bool
    reason: str  # why not (one short line), or how ("Triton interpreter")
    native: bool  # on MX hardware here; else emulated
    verified_on: list[str]  # declared (kernels.select.declarations)
    verified_here: bool  # a declared verified_on entry matches this platform
    probed: Optional[dict[str, Any]]  # {ok, total, failed: [scheme: message]} from the record


@dataclass
class ProbeRecordFacts:
    path: str
    found: bool
    date: Optional[str] = None
    ok: int = 0
    total: int = 0
    versions: dict[str, Any] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)  # 'torch 2.11.0 -> 2.13.0', ...
    triton_interpret: Optional[bool] = None
    failed: list[str] = field(default_factory=list)  # 'scheme / kernel: message'
    problem: Optional[str] = None  # unreadable record


@dataclass
class DoctorReport:
    environment: dict[str, Any]
    kernels: list[KernelFacts]
    record: ProbeRecordFacts
    problems: list[str]  # each one line; any -> exit 1
    warnings: list[str]
    plugins: str  # the kernel table's status line

    @property
    def healthy(self) -> bool:
        return not self.problems

    def verdict(self) -> str:
        plat = self.environment["platform"]
        if self.problems:
            return f"NOT HEALTHY: {len(self.problems)} problem(s) on {plat} (listed above)"
        listed = ", ".join(f"{kind} {n}" for kind, n in self.listed_by_kind().items())
        probe = (f"recorded probe {self.record.ok}/{self.record.total} pairs ok"
                 if self.record.found else "not probed here (run `registry lint --probe`)")
        warn = f"; {len(self.warnings)} warning(s)" if self.warnings else ""
        return (f"healthy: every kernel listed for {plat} ({listed}) can run here; "
                f"{probe}{warn}")

    def listed_by_kind(self) -> dict[str, int]:
        """How many kernels of each kind are listed for this platform."""
        from kernels.select.declarations import KINDS

        return {kind: sum(k.listed for k in self.kernels if k.kind == kind) for kind in KINDS}

    def to_dict(self) -> dict[str, Any]:
        return {"environment": self.environment, "kernels": [asdict(k) for k in self.kernels],
                "probe_record": asdict(self.record), "plugins": self.plugins,
                "problems": self.problems, "warnings": self.warnings,
                "healthy": self.healthy, "verdict": self.verdict()}


# --- the environment -----------------------------------------------------------------------------

def import_error(module: str) -> Optional[str]:
    """None when `module` imports, else the one-line reason."""
    import importlib

    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - absent or broken: a fact
        return f"{type(e).__name__}: {' '.join(str(e).split())}"
    return None


def detect_platform() -> tuple[Platform, str]:
    """(platform, how): detected from torch, else cpu with the reason."""
    try:
        return detect(), "detected"
    except ImportError:
        return Platform("cpu"), "assumed: torch is not installed"
    except Exception as e:  # noqa: BLE001 - a broken driver must not hide the rest
        return Platform("cpu"), f"assumed: detection raised {type(e).__name__}: {e}"


def environment_facts(plat: Platform, how: str) -> dict[str, Any]:
    versions = runtime_versions()
    torch_error = import_error("torch") if versions["torch"] is None else None
    triton_error = import_error("triton") if versions["triton"] is None else None
    env = {
        "python": pyplatform.python_version(),
        "registry": versions["registry"],
        "torch": versions["torch"], "torch_error": torch_error,
        "torch_missing_means": TORCH_MISSING if torch_error else None,
        "triton": versions["triton"], "triton_error": triton_error,
        "triton_missing_means": TRITON_MISSING if triton_error else None,
        "cuda": versions["cuda"], "hip": versions["hip"],
        "gpu": None, "gpu_note": None, "driver": None,
        "device": versions["device"],
        "settings": {name: os.environ.get(name) for name, _ in ENV_SETTINGS},
        "platform": str(plat), "platform_how": how,
        "probe_record_path": str(record_path(plat)),
    }
    if torch_error is None:
        _gpu_facts(env)
    else:
        env["gpu_note"] = "unknown: torch is not installed"
    return env


def _gpu_facts(env: dict[str, Any]) -> None:
    import torch

    try:
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            if env["cuda"]:
                env["driver"] = driver_version()
            return
        if hasattr(torch, "xpu") and torch.xpu.is_available():
            env["gpu"] = torch.xpu.get_device_name(0)
            return
    except Exception as e:  # noqa: BLE001
        env["gpu_note"] = f"query raised {type(e).__name__}: {' '.join(str(e).split())}"
        return
    runtime = f"CUDA {env['cuda']}" if env["cuda"] else f"ROCm {env['hip']}"
    build = ("a CPU-only torch build" if not (env["cuda"] or env["hip"])
             else f"torch built for {runtime}")
    env["gpu_note"] = f"none: torch.cuda.is_available() is False ({build})"


# --- the kernels ---------------------------------------------------------------------------------

def disabled_names() -> list[str]:
    """The kernel names of REGISTRY_DISABLED_KERNELS, read as resolve reads them."""
    from kernels.select.resolve import env_disabled

    return list(env_disabled())


def _why_not_loaded(name: str, torch_ok: bool) -> Optional[str]:
    """None when the kernel's implementation loads, else one short reason."""
    if not torch_ok:
        return "torch is not installed"
    try:
        from kernels.base import load_kernel

        load_kernel(name)
    except ModuleNotFoundError as e:
        missing = (e.name or "").split(".")[0]
        if missing in ("triton", "torch"):
            return f"needs {missing}, which is not installed"
        return f"its impl does not import: ModuleNotFoundError: {e}"
    except Exception as e:  # noqa: BLE001 - any failure is the reason
        text = " ".join(str(e).split())
        return f"its impl does not load: {type(e).__name__}: {text}"
    return None


def kernel_facts(plat: Platform, torch_ok: bool, record: Optional[dict[str, Any]]
                 ) -> tuple[list[KernelFacts], list[str]]:
    """One row per kernel of the table, grouped by kind (linear, moe, qdq), and the broken
    plugins (one line each)."""
    from kernels.select.declarations import KINDS
    from kernels.select.kernel_table import kernel_table

    table = kernel_table()
    problems = [str(p) for p in table.problems]
    usable = dataclasses.replace(table, problems=())  # the kernels that did load, to describe
    listed = {d.name for kind in KINDS for d in usable.candidates_for(plat, kind)}
    disabled = set(disabled_names())
    pairs = (record or {}).get("pairs", [])
    rows = []
    for entry in sorted(table.entries, key=lambda e: KINDS.index(e.decl.kind)):
        d = entry.decl
        if problems:
            runs, reason = False, "refused: a kernel plugin is broken (see problems)"
        elif not d.runs_on(plat) and not interpreted_here(d.name, plat):
            runs, reason = False, f"does not run on {plat} (runs on {', '.join(d.platforms)})"
        else:
            why = _why_not_loaded(d.name, torch_ok)
            runs = why is None
            reason = why or ("in the Triton interpreter (TRITON_INTERPRET=1)"
                             if interpreted_here(d.name, plat) else "")
        mine = [p for p in pairs if p.get("kernel") == d.name]
        probed = None
        if mine:
            bad = [p for p in mine if not p.get("ok")]
            probed = {"ok": len(mine) - len(bad), "total": len(mine),
                      "failed": [f"{p['scheme']}: {p.get('message', '?')}" for p in bad]}
        rows.append(KernelFacts(
            d.name, d.kind, entry.source, d.name in listed, d.name in disabled, runs, reason,
            d.is_native_on(plat), list(d.verified_on), d.is_verified_on(plat), probed))
    return rows, problems


def record_facts(path: Path, record: Optional[dict[str, Any]], problem: Optional[str],
                 kernels: list[str], now: dict[str, Any]) -> ProbeRecordFacts:
    """The record as doctor shows it: its pairs of `kernels`, and how its versions differ
    from `now`'s."""
    if record is None:
        return ProbeRecordFacts(str(path), False, problem=problem)
    pairs = [p for p in record["pairs"] if p["kernel"] in kernels]
    failed = [f"{p['scheme']} / {p['kernel']}: {p.get('message', '?')}"
              for p in pairs if not p["ok"]]
    return ProbeRecordFacts(
        str(path), True, record.get("date"), len(pairs) - len(failed), len(pairs),
        dict(record["versions"]), stale_versions(record, now),
        record.get("triton_interpret"), failed)


# --- the report ----------------------------------------------------------------------------------

def gather(catalog: Optional[Catalog] = None) -> DoctorReport:
    """Every fact doctor prints, and the problems / warnings that decide its exit code."""
    from kernels.select.kernel_table import kernel_table

    plat, how = detect_platform()
    env = environment_facts(plat, how)
    torch_ok = env["torch_error"] is None
    path = record_path(plat)
    record, record_problem = read_record(plat, path)
    kernels, plugin_problems = kernel_facts(plat, torch_ok, record)
    problems = list(plugin_problems)
    rec = record_facts(path, record, record_problem, [k.name for k in kernels],
                       {k: env[k] for k in VERSION_KEYS})
    warnings: list[str] = []
    if not torch_ok:
        problems.append(f"torch does not import ({env['torch_error']}): {TORCH_MISSING}")
    elif how.startswith("assumed"):  # torch imports, but the device could not be detected
        problems.append(f"platform {plat} {how}; the kernels below are those of {plat}, not "
                        "necessarily of this machine: fix the driver / runtime")
    names = {k.name for k in kernels}
    unknown = [n for n in disabled_names() if n not in names]
    if unknown:
        problems.append(f"REGISTRY_DISABLED_KERNELS names unknown kernel(s) "
                        f"{', '.join(map(repr, unknown))}: every resolve refuses; "
                        f"known kernels: {', '.join(sorted(names))}")
    if torch_ok and not plugin_problems:  # else those lines already say why nothing runs
        problems += [f"{k.name} is listed for {plat} but cannot run here: {k.reason}"
                     for k in kernels if k.listed and not k.runs_here and not k.disabled]
    if rec.problem:
        warnings.append(rec.problem)
    if rec.failed:
        problems += [f"recorded probe ({rec.date}) failed: {f}" for f in rec.failed]
    if rec.found and rec.stale:
        warnings.append(f"the recorded probe ran with other versions ({'; '.join(rec.stale)}): "
                        "run `registry lint --probe` again")
    if catalog is not None:
        problems += [str(f) for f in catalog.errors]
    return DoctorReport(env, kernels, rec, problems, warnings, kernel_table().status())
