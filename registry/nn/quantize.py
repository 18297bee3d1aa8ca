"""`quantize_model`: replace a model's nn.Linear layers by `MXLinear`, and say what happened.

Which layers: every nn.Linear is a candidate; `targets` selects, `ignore` removes, and a scheme
mapping `{pattern: scheme}` gives each layer the scheme of its first matching key. Patterns
(`re:REGEX`, globs, exact layer names, class names) are read by `registry.nn.layer_patterns`.
A target entry that matches no layer, and a class-name target naming a module that is not an
nn.Linear, are errors; an ignore entry that matches nothing is a note in the report.

A targeted layer that cannot be quantized (in_features not a multiple of 32, no kernel, a
fallback under `strict`) is an error naming the layer, unless `ignore` names it. A targeted
layer that is already an MXLinear is left unchanged when it has the requested scheme (its row
and a note say so) and is an error naming it and both schemes otherwise: its float weights are
gone, and the old scheme must not stay while the report says the new one. Nothing is replaced
until every layer has been built, so an error leaves the model as it was.

`platform=None` resolves each layer for the platform of its own device; a named platform must
be that platform (layers run where their tensors are). `plan_quantization` answers the same
question for any platform without touching the model (the what-if report).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Optional, Union

import torch
from torch import Tensor, nn

from kernels.select.resolve import Resolution, ResolutionError, resolve
from kernels.spec.contract import MX_BLOCK
from kernels.spec.platform import Platform, platform_of
from registry.contract import Scheme
from registry.files.catalog import Catalog, load_schemes
from registry.nn.layer_patterns import LayerPatterns, check_shared_names, module_class_names
from registry.nn.layers import MXLinear, layer_platform, scheme_of
from registry.text import table

SchemeSpec = Union[Scheme, str, Mapping[str, Union[Scheme, str]]]
Calibration = Union[Callable[[nn.Module], Any], Tensor, tuple, list, Mapping]


@dataclass(frozen=True)
class LayerRow:
    """One nn.Linear / MXLinear of the model and what quantization did (or would do) to it."""

    layer: str
    in_features: int
    out_features: int
    scheme: Optional[str]
    kernel: Optional[str]
    platform: Optional[str]
    fallback: bool
    quantized: bool
    reason: str
    deviations: tuple[str, ...] = ()  # resolve's Deviation lines: why not the first choice

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class QuantizationReport:
    """Per-layer rows; `applied` is False for a plan (the model was not changed)."""

    rows: list[LayerRow]
    applied: bool
    notes: list[str] = field(default_factory=list)

    def to_dicts(self) -> list[dict]:
        return [r.to_dict() for r in self.rows]

    @property
    def quantized(self) -> list[LayerRow]:
        return [r for r in self.rows if r.quantized]

    def row(self, layer: str) -> LayerRow:
        for r in self.rows:
            if r.layer == layer:
                return r
        raise KeyError(f"no layer {layer!r} in the report; layers: "
                       f"{', '.join(r.layer for r in self.rows)}")

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        head = ["layer", "in->out", "scheme", "kernel", "platform", "deviations", "reason"]
        body = [[r.layer, f"{r.in_features}->{r.out_features}", r.scheme or "-", r.kernel or "-",
                 r.platform or "-", ",".join(d.split(":", 1)[0] for d in r.deviations) or "-",
                 r.reason] for r in self.rows]
        what = "quantized" if self.applied else "would quantize (plan; model unchanged)"
        lines = [f"{what}: {len(self.quantized)} of {len(self.rows)} linear layers",
                 table([head] + body)]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Deciding (no resolution yet)
# ---------------------------------------------------------------------------------------------

@dataclass
class _Layer:
    names: list[str]  # every path of the module (a shared module has several)
    module: nn.Module
    scheme: Optional[Scheme] = None  # set: to be quantized
    reason: str = ""  # why not, otherwise


def _decide(model: nn.Module, scheme: SchemeSpec, targets: Any, ignore: Any,
            catalog: Optional[Catalog]) -> tuple[list[_Layer], list[str]]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    tgt, ign = LayerPatterns("targets", targets), LayerPatterns("ignore", ignore)
    catalog = catalog if catalog is not None or isinstance(scheme, Scheme) else load_schemes()
    if isinstance(scheme, Mapping):
        if not scheme:
            raise ValueError("the scheme mapping is empty; give {pattern: scheme} entries")
        by_key = {k: scheme_of(v, catalog) for k, v in scheme.items()}
        keys: Optional[LayerPatterns] = LayerPatterns("scheme mapping key", list(by_key))
    else:
        single, keys = scheme_of(scheme, catalog), None
    layers: dict[int, _Layer] = {}
    shape_problems: list[str] = []
    for name, m in model.named_modules(remove_duplicate=False):
        if not isinstance(m, (nn.Linear, MXLinear)):
            named = sorted(set(tgt.class_names()) & module_class_names(m))
            if named:
                raise ValueError(f"targets {named[0]!r} matches {name or 'the model'} "
                                 f"({type(m).__name__}): only nn.Linear layers can be quantized; "
                                 "remove it from targets")
            continue
        if name == "":
            raise ValueError("the model itself is a linear layer; wrap it (nn.Sequential(layer)) "
                             "so the layer can be replaced")
        if id(m) in layers:
            layers[id(m)].names.append(name)
            check_shared_names(layers[id(m)].names[0], name, m,
                               (tgt, ign) + ((keys,) if keys else ()))
            continue
        layer = layers[id(m)] = _Layer([name], m)
        if tgt.first(name, m) is None:
            layer.reason = f"not matched by targets ({', '.join(tgt.items)})"
            continue
        hit = ign.first(name, m)
        if hit is not None:
            layer.reason = f"ignored by pattern {hit!r}"
            continue
        chosen = single if keys is None else None
        if keys is not None:
            key = keys.first(name, m)
            if key is None:
                layer.reason = "matched by no key of the scheme mapping"
                continue
            chosen = by_key[key]
        if isinstance(m, MXLinear):
            layer.reason = _already(name, m, chosen)
            continue
        if m.in_features % MX_BLOCK:
            shape_problems.append(f"{name} (in_features {m.in_features})")
            continue
        if m.weight.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"layer {name}: weight dtype {m.weight.dtype}; MX layers take "
                             "float32, bfloat16 or float16 weights and activations: cast the "
                             f"model first (e.g. model.float()) or add {name!r} to ignore=[...]")
        layer.scheme = chosen
    if shape_problems:
        raise ValueError(f"cannot quantize {', '.join(shape_problems)}: in_features must be a "
                         f"multiple of the MX block {MX_BLOCK}; add these layers to ignore=[...]")
    for patterns in (tgt, keys):
        if patterns is not None and patterns.unused():
            raise ValueError(f"{patterns.what} entry {patterns.unused()[0]!r} matches no linear "
                             f"layer; layer names look like {_example(layers)!r}")
    notes = [f"ignore entry {p!r} matched no targeted layer" for p in ign.unused()]
    same = [lay.names[0] for lay in layers.values() if lay.reason.startswith(_ALREADY)]
    if same:
        notes.append(f"{len(same)} layer(s) were already quantized with the requested scheme "
                     f"and were left unchanged ({', '.join(same[:3])}{', ...' * (len(same) > 3)})")
    return list(layers.values()), notes


_ALREADY = "already quantized with"


def _already(name: str, layer: MXLinear, wanted: Scheme) -> str:
    """The reason row of a targeted layer already quantized with `wanted`; an error for any
    other scheme (its float weights are gone: quantizing the codes again would compound the
    rounding and silently keep, or lose, the old contract)."""
    have = layer.scheme
    if have.name == wanted.name and have.contract == wanted.contract:
        return f"{_ALREADY} {wanted.name}; left unchanged"
    raise ValueError(f"layer {name} is already quantized with {have.name} ({have.contract}); "
                     f"{wanted.name} was requested: quantize the float model instead, or add "
                     f"{name!r} to ignore=[...] to keep it as it is")


def _example(layers: dict[int, _Layer]) -> str:
    return next((lay.names[0] for lay in layers.values()), "(the model has no nn.Linear)")


def _in_layer(name: str, error: Exception) -> Exception:
    """The same kind of error, its message prefixed with the layer."""
    message = f"layer {name}: {error}"
    if isinstance(error, ResolutionError):
        return ResolutionError(message, error.resolution)
    try:
        return type(error)(message)
    except TypeError:
        return ValueError(message)


def _row(name: str, layer: _Layer, res: Optional[Resolution] = None) -> LayerRow:
    m = layer.module
    if isinstance(m, MXLinear):  # quantized now (reason: its kernel's), or before this call
        res = m.resolution
        reason = layer.reason or (res.chosen.reason if res.chosen else "")
        if layer.scheme is None and not reason.startswith(_ALREADY):  # not requested this call
            reason = f"{reason}; {_ALREADY} {m.scheme_name}, left unchanged"
        return LayerRow(name, m.in_features, m.out_features, m.scheme_name, res.kernel,
                        res.platform, res.fallback, True, reason, _deviations(res))
    if res is None:
        return LayerRow(name, m.in_features, m.out_features, None, None, None, False, False,
                        layer.reason)
    return LayerRow(name, m.in_features, m.out_features, res.scheme, res.kernel, res.platform,
                    res.fallback, True, res.chosen.reason, _deviations(res))


def _deviations(res: Resolution) -> tuple[str, ...]:
    return tuple(str(d) for d in res.deviations)


def _resolve_layers(layers: list[_Layer], platform: Optional[Platform], strict: bool
                    ) -> dict[int, Resolution]:
    """Each layer to quantize resolved on `platform` (None: its device's); errors name it."""
    out = {}
    for layer in layers:
        if layer.scheme is None:
            continue
        m = layer.module
        try:
            out[id(m)] = resolve(layer.scheme, platform or layer_platform(m.weight.device),
                                 strict=strict, shape=(m.out_features, m.in_features),
                                 act_dtype=str(m.weight.dtype).removeprefix("torch."))
        except (ResolutionError, ValueError) as e:
            raise _in_layer(layer.names[0], e) from None
    return out


def plan_quantization(model: nn.Module, scheme: SchemeSpec, *, targets: Any = ("Linear",),
                      ignore: Any = (), platform: Union[str, Platform, None] = None,
                      strict: bool = False, catalog: Optional[Catalog] = None
                      ) -> QuantizationReport:
    """What `quantize_model` would do, on `platform` (any, e.g. "cuda:sm100") or each layer's
    own device; the model is not changed. Raises the same errors quantize_model would."""
    layers, notes = _decide(model, scheme, targets, ignore, catalog)
    what_if = None if platform is None else platform_of(platform)
    resolved = _resolve_layers(layers, what_if, strict)
    rows = [_row(n, lay, resolved.get(id(lay.module))) for lay in layers for n in lay.names]
    return QuantizationReport(rows, applied=False, notes=notes)


# ---------------------------------------------------------------------------------------------
# Applying
# ---------------------------------------------------------------------------------------------

def quantize_model(model: nn.Module, scheme: SchemeSpec, *, targets: Any = ("Linear",),
                   ignore: Any = (), platform: Union[str, Platform, None] = None,
                   strict: bool = False, act_scales: Optional[Mapping[str, Any]] = None,
                   calibration: Optional[Calibration] = None,
                   catalog: Optional[Catalog] = None) -> QuantizationReport:
    """Replace the matching nn.Linear layers of `model` in place by MXLinear; the report.

    `scheme`: a name / alias / Scheme, or {pattern: scheme} (first matching key wins).
    Static activation keys (the `*_a_fp8` schemes) need a per-tensor input scale per layer:
    `act_scales={layer name: scale}` (e.g. a checkpoint's input_scale), and/or `calibration`
    for the rest: a callable run as `calibration(model)`, or inputs run as `model(x)`,
    `model(*args)` or `model(**kwargs)` on the float model (scale = max |input| / 448).
    `platform`, when given, must be the platform of the layers' device (see plan_quantization
    for what-if answers).
    """
    layers, notes = _decide(model, scheme, targets, ignore, catalog)
    todo = [lay for lay in layers if lay.scheme is not None]
    for layer in todo if platform is not None else ():
        here = layer_platform(layer.module.weight.device)
        if platform_of(platform) != here:
            raise ValueError(
                f"layer {layer.names[0]}: platform {platform_of(platform)} is not the platform "
                f"of its device {layer.module.weight.device} ({here}): layers run their kernel "
                f"where their tensors live; move the model there, or ask plan_quantization(..., "
                f"platform='{platform_of(platform)}') for a what-if report")
    _resolve_layers(layers, None, strict)
    scales = _static_scales(model, todo, act_scales, calibration)
    built: dict[int, MXLinear] = {}
    for layer in todo:
        try:
            built[id(layer.module)] = MXLinear.from_linear(
                layer.module, layer.scheme, platform=platform, strict=strict,
                act_scale=scales.get(layer.names[0]), name=layer.names[0])
        except (ResolutionError, ValueError, TypeError) as e:
            raise _in_layer(layer.names[0], e) from None
    for layer in todo:  # nothing is replaced before every layer was built
        layer.module = built[id(layer.module)]
        for name in layer.names:
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, layer.module)
    rows = [_row(n, lay) for lay in layers for n in lay.names]
    return QuantizationReport(rows, applied=True, notes=notes)


def _static_scales(model: nn.Module, todo: list[_Layer], act_scales: Optional[Mapping[str, Any]],
                   calibration: Optional[Calibration]) -> dict[str, Any]:
    """Per static layer (by first name), its input scale: given, or calibrated; else an error."""
    static = {lay.names[0]: lay for lay in todo if lay.scheme.contract.activation is not None
              and lay.scheme.contract.activation.static}
    given = dict(act_scales or {})
    for name in given:
        if name not in static:
            known = ", ".join(static) or "none of the layers being quantized has one"
            raise ValueError(f"act_scales names {name!r}, which is not a layer with a static "
                             f"activation scale (those are: {known})")
    missing = [n for n in static if n not in given]
    if calibration is not None and not missing:
        why = "every static layer has an act_scales entry" if static else \
            "no layer being quantized has a static activation key"
        raise ValueError(f"calibration= was given but is not needed: {why}; remove it")
    if missing and calibration is None:
        lay = static[missing[0]]
        raise ValueError(
            f"layer {missing[0]} uses {lay.scheme.name}, whose activation "
            f"{lay.scheme.contract.activation} needs a static input scale; pass "
            f"act_scales={{'{missing[0]}': scale}} or calibration=<sample inputs or a callable "
            f"running the model> ({len(missing)} layer(s) lack one: {', '.join(missing)})")
    if missing:
        given.update(_calibrate(model, {n: static[n] for n in missing}, calibration))
    return given


def _calibrate(model: nn.Module, layers: dict[str, _Layer], calibration: Calibration
               ) -> dict[str, Tensor]:
    """Run the float model once over `calibration`, recording each layer's input amax."""
    from kernels.dispatch import calibrate_act_scale

    seen: dict[str, list[Tensor]] = {n: [] for n in layers}

    def recorder(name: str):
        def hook(module: nn.Module, args: tuple) -> None:
            seen[name].append(args[0].detach().abs().float().amax().reshape(1).cpu())
        return hook

    handles = [lay.module.register_forward_pre_hook(recorder(n)) for n, lay in layers.items()]
    try:
        with torch.no_grad():
            if callable(calibration):
                calibration(model)
            elif isinstance(calibration, Tensor):
                model(calibration)
            elif isinstance(calibration, Mapping):
                model(**calibration)
            elif isinstance(calibration, (tuple, list)):
                model(*calibration)
            else:
                raise TypeError(f"calibration must be a callable, a tensor, a tuple / list of "
                                f"positional inputs or a dict of keyword inputs, got "
                                f"{type(calibration).__name__}")
    finally:
        for h in handles:
            h.remove()
    out = {}
    for name, lay in layers.items():
        if not seen[name]:
            raise ValueError(f"calibration never ran layer {name}; pass inputs that reach it, or "
                             f"act_scales={{'{name}': scale}}")
        try:
            out[name] = calibrate_act_scale(lay.scheme.contract.activation, torch.cat(seen[name]))
        except ValueError as e:
            raise _in_layer(name, e) from None
    return out


__all__ = ["LayerRow", "QuantizationReport", "plan_quantization", "quantize_model"]
