"""What a checkpoint directory holds, layer by layer, checked against its config: `registry inspect`.

Why: before serving a checkpoint, a user needs to know that every tensor the config calls
quantized is stored quantized in the format the scheme says, that its scales are sane, and which
kernel would run it where. Tensors are read one at a time (codes and scales of one layer), so a
100 GB checkpoint inspects in the memory of its largest layer.

Findings (each one line, naming the layer / tensor): codes and scales shapes disagree or have
the wrong dtype; K not a multiple of 32; scale bytes 0xFF (NaN blocks); a float weight the config
says is quantized; a quantized tensor no config entry maps to a scheme; a layer's codes missing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Union

import torch

from kernels.spec.formats import E8M0_NAN
from kernels.spec.platform import Platform
from registry.checkpoints.formats import CheckpointFormatError
from registry.checkpoints.plan import CheckpointPlan, StoredLayer, plan_checkpoint
from registry.checkpoints.reader import CheckpointReader
from registry.checkpoints.tp import SplitCheck, check_split
from registry.files.catalog import Catalog


@dataclass
class LayerReport:
    """One layer: status, scheme, tensors, kernel per platform, findings, tp checks."""

    name: str
    kind: str
    scheme: Optional[str]
    group: Optional[str]
    tensors: list[dict[str, Any]]
    mx_shape: Optional[tuple[int, ...]] = None
    kernels: dict[str, str] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    splits: list[SplitCheck] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.name, "stored": self.kind, "scheme": self.scheme,
                "config_entry": self.group, "tensors": self.tensors,
                "shape": None if self.mx_shape is None else list(self.mx_shape),
                "bytes": sum(t["bytes"] for t in self.tensors), "kernels": self.kernels,
                "findings": self.findings, "tp": [s.to_dict() for s in self.splits]}


@dataclass
class InspectReport:
    """The whole checkpoint: format, files, layers, tensors of no layer, findings."""

    directory: str
    format: str
    files: list[str]
    layers: list[LayerReport]
    other: list[dict[str, Any]]
    findings: list[str]
    platforms: list[str]
    tps: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"directory": self.directory, "format": self.format, "files": self.files,
                "platforms": self.platforms, "tp": list(self.tps),
                "layers": [layer.to_dict() for layer in self.layers], "other": self.other,
                "findings": self.findings, "ok": not self.findings}


def _tensor_dict(info: Any) -> dict[str, Any]:
    return {"name": info.name, "dtype": info.dtype, "shape": list(info.shape),
            "bytes": info.nbytes, "file": info.file}


def _nan_blocks(layer: str, name: str, scales: torch.Tensor) -> Optional[str]:
    """A finding for scale bytes 0xFF (E8M0 NaN: the block dequantizes to NaN), else None."""
    bad = scales == E8M0_NAN
    count = int(bad.sum())
    if not count:
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    return (f"{layer}: {name} holds {count} scale byte(s) 0xFF (E8M0 NaN: every weight of "
            f"those blocks is NaN), first at index {first}; re-export the layer from finite "
            "weights")


def _check_quantized(plan: CheckpointPlan, entry: StoredLayer, report: LayerReport) -> None:
    """Read the layer's codes and scales (one layer at a time) and check them."""
    reader, fmt = plan.reader, plan.fmt
    if entry.group is None:
        report.findings.append(f"{entry.name}: stored quantized but no entry of "
                               f"{reader.config_path} claims it (a quantized tensor left "
                               "unmapped); add it to a config group's targets")
        return
    if entry.scheme is None:
        why = entry.group.error or (f"the config leaves it unquantized ({entry.group.path}): a "
                                    "quantized tensor left unmapped")
        report.findings.append(f"{entry.name}: stored quantized but {why}")
        return
    if entry.problem or entry.names is None:
        report.findings.append(entry.problem or f"{entry.name}: no tensor names")
        return
    names = entry.names
    for needed in (names.codes, names.scales):
        if needed not in reader:
            report.findings.append(f"{entry.name}: {needed} is missing (the "
                                   f"{entry.scheme.name} weight needs {names.codes} and "
                                   f"{names.scales}); re-export the layer")
            return
    scales = reader.get_tensor(names.scales)
    try:
        mx = fmt.mx_from_tensors(names, reader.get_tensor(names.codes), scales,
                                 entry.scheme.contract.weight)
    except (CheckpointFormatError, ValueError) as e:
        report.findings.append(f"{entry.name}: {e}")
        return
    report.mx_shape = tuple(mx.shape)
    nan = _nan_blocks(entry.name, names.scales, mx.scales)
    if nan:
        report.findings.append(nan)


def _kernels(scheme: Any, platforms: list[Platform], shape: Optional[tuple[int, ...]]
             ) -> dict[str, str]:
    from kernels.select.resolve import resolve

    out = {}
    kind = "moe" if shape is not None and len(shape) == 3 else "linear"
    for plat in platforms:
        try:
            res = resolve(scheme, plat, kind=kind,
                          shape=None if shape is None or kind == "moe" else shape[-2:])
            out[str(plat)] = res.kernel + (" (fallback)" if res.fallback else "")
        except Exception as e:  # noqa: BLE001 - resolve's refusal is the answer to show
            out[str(plat)] = f"none: {str(e).splitlines()[0]}"
    return out


def inspect_checkpoint(directory: Union[str, os.PathLike], *,
                       platforms: Iterable[Union[str, Platform]] = (),
                       tps: Iterable[int] = (), catalog: Optional[Catalog] = None
                       ) -> InspectReport:
    """Inspect a checkpoint directory (see the module docstring); `platforms`: the platforms
    to resolve kernels for (default: this machine's); `tps`: tensor-parallel sizes to check."""
    plats = [Platform.parse(p) if isinstance(p, str) else p for p in platforms]
    if not plats:
        from kernels.spec.platform import detect
        plats = [detect()]
    tps = tuple(tps)
    with CheckpointReader(directory) as reader:
        plan = plan_checkpoint(reader, catalog)
        layers: list[LayerReport] = []
        for entry in plan.layers:
            report = LayerReport(entry.name, entry.kind,
                                 entry.scheme.name if entry.scheme else None,
                                 entry.group.path if entry.group else None,
                                 [_tensor_dict(t) for t in entry.tensors])
            if entry.kind == "quantized":
                _check_quantized(plan, entry, report)
            elif entry.scheme is not None:
                report.findings.append(
                    f"{entry.name}: stored in float ({entry.tensors[0].dtype} "
                    f"{list(entry.tensors[0].shape)}) but {entry.group.where}: "
                    f"{entry.group.path} says it is quantized ({entry.scheme.name}); exclude it "
                    "in the config or re-export it quantized")
            else:
                report.mx_shape = None
            if entry.scheme is not None and entry.kind == "quantized":
                report.kernels = _kernels(entry.scheme, plats, report.mx_shape)
            if report.mx_shape is not None:
                n, k = report.mx_shape[-2], report.mx_shape[-1]
                report.splits = [check_split(entry.name, n, k, tp) for tp in tps]
            layers.append(report)
        return InspectReport(str(reader.directory), plan.fmt.name, reader.files, layers,
                             [_tensor_dict(t) for t in plan.other],
                             [f for layer in layers for f in layer.findings],
                             [str(p) for p in plats], tps)


__all__ = ["InspectReport", "LayerReport", "inspect_checkpoint"]
