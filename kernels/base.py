"""The linear-kernel interface: declared acceptance (data) + prepare + apply.

A kernel class points at its `KernelDecl` (kernels/select/declarations.py, or a plugin's; both
looked up through kernels/select/kernel_table.py); acceptance is read from there by resolve, lint
and the matrix, never re-implemented here. `prepare` turns a float weight
(or an already quantized `MXTensor`) into a `PreparedWeight` that also carries the static
activation scale of a static activation key; `apply(x, prepared, bias)` runs the layer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

import torch
from torch import Tensor

from kernels.dispatch import activation_qdq, calibrate_act_scale
from kernels.mx import MXTensor, check_device, check_float_input, mx_quantize
from kernels.reference.fp8_tensor import check_act_scale
from kernels.select.declarations import KernelDecl
from kernels.spec.contract import SchemeContract


@dataclass
class PreparedWeight:
    """A layer's weight as a kernel needs it. `cache` holds kernel-owned derived tensors."""

    weight: MXTensor  # [N, K]
    contract: SchemeContract
    act_scale: Optional[Tensor] = None  # static per-tensor activation scale (0-dim fp32)
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]


class LinearKernel:
    """Base class of every linear kernel. Subclasses set `name` and implement `apply`."""

    name: ClassVar[str]

    @property
    def decl(self) -> KernelDecl:
        from kernels.select.kernel_table import kernel_by_name  # built-in and plugin kernels

        return kernel_by_name(self.name)

    # Weight layout this kernel wants for the quantized weight (None: the format's default).
    weight_layout: ClassVar[Optional[str]] = None

    def can_implement(self, in_features: int, out_features: int,
                      act_dtype: torch.dtype | None = None) -> tuple[bool, str]:
        return self.decl.check_limits(in_features, out_features, act_dtype)

    def prepare(self, weight: Tensor | MXTensor, contract: SchemeContract, *,
                act_scale: Tensor | float | None = None,
                calibration: Tensor | None = None) -> PreparedWeight:
        """Quantize (or check) the weight for `contract`; attach the static activation scale.

        A contract outside the kernel's declared families is refused here, so a weight-only
        kernel can never be handed an activation key and run the layer unquantized."""
        if contract.activation is not None:
            activation_qdq(contract.activation)  # UnknownActivationKey for a key it lacks
        if not self.decl.implements(contract):
            takes = {a for f in self.decl.accepts if contract.weight in f.weights
                     for a in f.activations}
            if contract.activation is not None and takes == {None}:
                why = (f"it is weight-only and would ignore the activation key "
                       f"{contract.activation}")
            else:
                why = "the contract is outside its declared families"
            runs = "; ".join(f.note for f in self.decl.accepts)
            raise ValueError(f"kernel {self.name} does not implement {contract}: {why} (it "
                             f"runs: {runs}); resolve the scheme (`registry resolve`) to pick a "
                             "kernel that does")
        wkey = contract.weight
        if isinstance(weight, MXTensor):
            if weight.fmt != wkey.format or weight.rounding != wkey.scale.rounding:
                raise ValueError(
                    f"weight MXTensor is {weight.fmt}/{weight.rounding} but the contract's weight "
                    f"key is {wkey}; quantize the weight with the scheme's format and rounding"
                )
            if len(weight.shape) != 2:
                raise ValueError(f"weight must be 2-D [out_features, in_features], got shape "
                                 f"{tuple(weight.shape)}")
            check_device(weight.device, "weight MXTensor")
            mx = weight
        else:
            if not isinstance(weight, Tensor) or weight.dim() != 2:
                got = tuple(weight.shape) if isinstance(weight, Tensor) else type(weight).__name__
                raise ValueError(f"weight must be a 2-D tensor [out_features, in_features], "
                                 f"got {got}")
            check_float_input(weight, "weight")
            mx = mx_quantize(weight, wkey.format, rounding=wkey.scale.rounding,
                             layout=self.weight_layout)
        if mx.shape[0] == 0:
            raise ValueError(f"weight has shape {tuple(mx.shape)}: out_features is 0; a layer "
                             "needs at least one output feature")
        ok, why = self.can_implement(mx.shape[1], mx.shape[0])
        if not ok:
            raise ValueError(f"kernel {self.name} cannot run this layer: {why}")
        prepared = PreparedWeight(mx, contract, static_scale(contract, act_scale, calibration))
        self.finish_prepare(prepared)
        return prepared

    def finish_prepare(self, prepared: PreparedWeight) -> None:
        """Hook: derive kernel-specific tensors into `prepared.cache`."""

    def apply(self, x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None) -> Tensor:
        raise NotImplementedError

    def route(self, x: Tensor, prepared: PreparedWeight) -> Optional[str]:
        """How a call of `x` runs on this weight, in words (a strategy and its config), for
        `registry bench`; None for a kernel with one way to run, or before the call that plans
        it (a kernel that plans at a call describes the plan that call made)."""
        return None

    def qdq_activation(self, x: Tensor, prepared: PreparedWeight, backend: str = "auto") -> Tensor:
        """The dispatcher's QDQ of `x` for the contract's activation key (identity: weight-only)."""
        key = prepared.contract.activation
        if key is None:
            return x
        return activation_qdq(key, backend=backend)(x, prepared.act_scale)


def static_scale(contract: SchemeContract, act_scale: Any, calibration: Tensor | None):
    key = contract.activation
    if key is None or not key.static:
        if act_scale is not None or calibration is not None:
            what = "weight-only" if key is None else f"dynamic ({key})"
            raise ValueError(f"the activation key is {what}: it takes no act_scale / calibration")
        return None
    if act_scale is not None and calibration is not None:
        raise ValueError("pass act_scale (from a checkpoint) or calibration (a sample batch), "
                         "not both")
    if act_scale is not None:
        return check_act_scale(act_scale)
    if calibration is not None:
        return check_act_scale(calibrate_act_scale(key, calibration).cpu())
    raise ValueError(
        f"activation key {key} is static: pass act_scale= (the checkpoint's per-tensor input "
        "scale) or calibration= (a sample batch of activations) when preparing the weight"
    )


def load_kernel(name: str) -> LinearKernel | Any:
    """An instance of the linear kernel called `name`, built-in or plugin (imports its `impl`
    module); for a moe / qdq kernel, its imported implementation (a function / a module:
    kernels.select.kernel_table.load_impl), so "does it load" is asked alike for every kind.

    KeyError for an unknown name; kernels.select.kernel_table.KernelPluginError when a plugin is
    broken
    or a plugin kernel's `impl` does not import / is not a LinearKernel named `name`.
    """
    import importlib

    from kernels.select.kernel_table import (KernelPluginError, PluginProblem, kernel_table,
                                             load_impl)

    entry = kernel_table().entry(name)
    if entry.decl.kind != "linear":
        return load_impl(name)
    module, _, attr = entry.decl.impl.partition(":")
    if entry.origin is None:  # built-in: its own import errors are the message
        return getattr(importlib.import_module(module), attr)()

    def refuse(why: str) -> KernelPluginError:
        return KernelPluginError([PluginProblem(entry.origin, (
            f"kernel {name!r} from {entry.origin}: impl {entry.decl.impl!r} {why}"))])

    try:
        cls = getattr(importlib.import_module(module), attr)
    except Exception as e:  # third-party code
        raise refuse(f"cannot be imported: {type(e).__name__}: {' '.join(str(e).split())}"
                     ) from None
    if not (isinstance(cls, type) and issubclass(cls, LinearKernel)):
        raise refuse("is not a kernels.base.LinearKernel subclass")
    if getattr(cls, "name", None) != name:
        raise refuse(f"has name {getattr(cls, 'name', None)!r}; set `name = {name!r}` on the "
                     "class")
    return cls()
