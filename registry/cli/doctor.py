"""`registry doctor`: is this machine ready to run MX schemes, and what was verified here?

Prints the facts of registry/machine/doctor.py: versions and settings, one row per kernel of
each kind (linear, moe, qdq: listed here, runs here or why not, native / emulated, declared
verified, probed here), the
recorded `registry lint --probe` run of this platform, then the problems and a one-line verdict.
Exit 0 healthy, 1 a problem (a listed kernel cannot run, a recorded probe failed, a broken
plugin, a broken scheme file), 2 usage. torch is imported only inside `doctor_command`, and
only if present.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from registry.cli.common import catalog_of, record_or_warn
from registry.cli.output import print_json, table


def doctor_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the same facts as one JSON object")
    p.add_argument("--probe", action="store_true",
                   help="run `registry lint --probe` now (every pair that runs here) and record "
                        "it before reporting")


def doctor_command(args: argparse.Namespace) -> int:
    from registry.machine.doctor import gather

    catalog = catalog_of(args)
    live_failures = _probe_now(catalog) if args.probe else []
    report = gather(catalog)
    report.problems += [p for p in live_failures if p not in report.problems]
    if args.json:
        data = report.to_dict()
        data["environment"]["schemes"] = len(catalog.schemes)
        print_json(data)
    else:
        print(render(report, len(catalog.schemes)))
    return 0 if report.healthy else 1


def _probe_now(catalog) -> list[str]:
    """Probe every pair that runs here and record it; the problems the record cannot carry
    (no torch, a broken plugin, a record that could not be written)."""
    from kernels.select.kernel_table import KernelPluginError
    from registry.machine.doctor import import_error

    err = import_error("torch")
    if err:
        return [f"--probe: cannot probe without torch ({err})"]
    from registry.machine.probe import run_probe

    try:
        results = run_probe(catalog)
    except KernelPluginError:  # listed among the problems already
        return []
    bad = [r for r in results if not r.ok]
    print(f"probe: {len(results) - len(bad)} of {len(results)} (scheme, kernel) pairs verified",
          file=sys.stderr)
    if record_or_warn(results, "registry doctor") is not None:
        return []
    return [f"probe now failed: {r.scheme} / {r.kernel}: {r.message}" for r in bad]


def _or(value: Any, missing: str) -> str:
    return missing if value in (None, "") else str(value)


def _environment_rows(env: dict[str, Any], schemes: int, plugins: str) -> list[list[str]]:
    torch = env["torch"] or f"NOT INSTALLED ({env['torch_error']}): {env['torch_missing_means']}"
    triton = env["triton"] or (f"not installed ({env['triton_error']}): "
                               f"{env['triton_missing_means']}")
    gpu = env["gpu"] or _or(env["gpu_note"], "none")
    rows = [["python", env["python"]], ["registry", env["registry"]], ["torch", torch],
            ["triton", triton], ["CUDA runtime", _or(env["cuda"], "none")],
            ["HIP runtime", _or(env["hip"], "none")], ["GPU", gpu],
            ["driver", _or(env["driver"], "-")],
            ["platform", f"{env['platform']} ({env['platform_how']})"],
            ["kernel plugins", re.sub(r"^kernel plugins:?\s*", "", plugins)],
            ["schemes", f"{schemes} loaded"]]
    from registry.machine.doctor import ENV_SETTINGS

    for name, what in ENV_SETTINGS:
        value = env["settings"][name]
        rows.append([name, f"unset ({what})" if value is None else f"{value!r} ({what})"])
    return [[f"  {k}", v] for k, v in rows]


def _probed_cell(k) -> str:
    if k.probed is None:
        return "not probed"
    p = k.probed
    return f"{p['ok']}/{p['total']} ok" + (f", {len(p['failed'])} FAILED" if p["failed"] else "")


def _kernel_rows(report) -> list[list[str]]:
    rows = [["  kernel", "kind", "source", "listed", "runs here", "mode", "verified",
             "probed here", "note"]]
    for k in report.kernels:
        listed = ("yes, disabled" if k.disabled else "yes") if k.listed else "no"
        verified = "yes" if k.verified_here else \
            ("no" + (f" ({', '.join(k.verified_on)})" if k.verified_on else ""))
        mode = ("native" if k.native else "emulated") if k.runs_here else "-"
        rows.append([f"  {k.name}", k.kind, k.source, listed, "yes" if k.runs_here else "NO", mode,
                     verified, _probed_cell(k), k.reason or "-"])
    return rows


def _record_lines(rec) -> list[str]:
    if not rec.found:
        return [f"probe record: {rec.path}", "  not probed: run `registry lint --probe`"
                + (f" ({rec.problem})" if rec.problem else "")]
    v = rec.versions
    interp = ", TRITON_INTERPRET=1" if rec.triton_interpret else ""
    lines = [f"probe record: {rec.path}",
             f"  {rec.date}: {rec.ok}/{rec.total} (scheme, kernel) pairs ok, with torch "
             f"{_or(v.get('torch'), 'none')}, triton {_or(v.get('triton'), 'none')}, CUDA "
             f"{_or(v.get('cuda'), 'none')}, HIP {_or(v.get('hip'), 'none')}, device "
             f"{_or(v.get('device'), '?')}, registry {_or(v.get('registry'), '?')}{interp}"]
    return lines  # stale versions: among the warnings


def render(report, schemes: int) -> str:
    """The human report: environment, kernels, probe record, problems, verdict."""
    env = report.environment
    lines = ["registry doctor", "", "environment",
             table(_environment_rows(env, schemes, report.plugins)), "",
             f"kernels on {env['platform']}, every kind (listed: a candidate of this platform "
             "for its kind; verified: declared verified_on this platform)",
             table(_kernel_rows(report)), ""]
    lines += _record_lines(report.record)
    if report.problems:
        lines += ["", "problems:"] + [f"  - {p}" for p in report.problems]
    if report.warnings:
        lines += ["", "warnings:"] + [f"  - {w}" for w in report.warnings]
    lines += ["", f"verdict: {report.verdict()}"]
    return "\n".join(lines)
