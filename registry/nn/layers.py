"""`MXLinear`: an nn.Linear replacement holding an MX weight and the kernel resolved for it;
`MXGroupedExperts`: kernels.moe's MoE layer, taking a scheme name or alias too.

The kernel is resolved once, when the layer is built, for the platform of the device its tensors
live on (`kernels.select.resolve.resolve`), and the weight is prepared for it once. The state
the layer keeps in `state_dict()` is the checkpoint's: `weight` (element codes, uint8, as the
MXTensor stores them), `weight_scale` (E8M0 bytes, uint8), `bias`, and `input_scale` (fp32,
static activation keys only).

Device / dtype rule: an MXLinear never runs a kernel resolved for another platform. `.to()`,
`.cuda()`, `.half()` ... move the buffers and then resolve again for the new device's platform
and activation dtype (the same scheme, `strict` and `disabled`), and re-prepare the weight; when
nothing can run there, the move raises ResolutionError naming the layer's scheme. The codes,
scale bytes and `input_scale` keep their dtype through any conversion. `load_state_dict` (or
`refresh()`) re-prepares from the loaded buffers, so no kernel cache goes stale.

torch.compile: traced code runs the layer as one `ocp_mx::linear` custom op (kernels/linear_op.py,
keyed by the layer's handle), so a model of MXLinear layers compiles with fullgraph=True; eager
inference calls the kernel directly, without the op's dispatch cost, and eager calls that
autograd records take the op too, so every kernel gives its gradients (MXGroupedExperts alike:
kernels/moe_op.py).

Building a layer for a platform other than its tensors' is refused: ask
`registry.nn.quantize.plan_quantization(..., platform=...)` or `registry resolve --platform` for a
what-if answer instead.
"""
from __future__ import annotations

import weakref
from typing import Any, Iterable, Optional

import torch
from torch import Tensor, nn

from kernels import moe
from kernels.base import LinearKernel, PreparedWeight, load_kernel
from kernels.linear_op import mx_linear, register_prepared, release, update_prepared
from kernels.mx import MXTensor
from kernels.select.resolve import Resolution, log_resolution, resolve
from kernels.spec.contract import MX_BLOCK
from kernels.spec.platform import Platform, device_platform, platform_of
from registry.contract import Scheme
from registry.files.catalog import Catalog, load_schemes

#: Activation dtypes a layer can be resolved for (the kernels' declared limits name these).
ACT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


#: The platform a tensor on a device runs on: kernels.spec.platform.device_platform itself (one
#: place for platform detection), named here for model code. `layer_platform` reads the name at
#: call time, so patching `registry.nn.layers.platform_for_device` changes what layers and
#: registry.nn.quantize see.
platform_for_device = device_platform
_LAYER_VENDORS = ("cpu", "cuda", "rocm", "xpu")


def layer_platform(device: torch.device | str) -> Platform:
    """The platform an MX layer on `device` runs on: platform_for_device(device), refused (one
    line) for a device type no layer runs on (meta, mps, ...)."""
    plat = platform_for_device(device)
    if plat.vendor not in _LAYER_VENDORS:
        raise ValueError(f"MX layers run on cpu, cuda (CUDA / ROCm) or xpu devices, not on "
                         f"{device}; move the model to one of those first")
    return plat


def scheme_of(scheme: Scheme | str, catalog: Optional[Catalog] = None) -> Scheme:
    """A Scheme from a Scheme, or from a name / alias looked up in `catalog` (default: all)."""
    if isinstance(scheme, Scheme):
        return scheme
    if not isinstance(scheme, str):
        raise TypeError(f"scheme must be a scheme name, an alias or a registry Scheme, got "
                        f"{type(scheme).__name__}")
    return (catalog if catalog is not None else load_schemes()).get(scheme)


class MXGroupedExperts(moe.MXGroupedExperts):
    """kernels.moe.MXGroupedExperts that also takes a scheme name or alias, looked up in
    `catalog` (default: every scheme directory) with the catalog's refusals: an unknown name,
    a name defined twice, a broken file. `MXGroupedExperts(weights, "w_mxfp4_a_mxfp4")`; a
    registry Scheme or a SchemeContract is taken as kernels.moe takes it."""

    def __init__(self, weights: moe.ExpertWeights, scheme: Scheme | moe.SchemeLike | str, *,
                 catalog: Optional[Catalog] = None, **options: Any) -> None:
        if isinstance(scheme, str):
            scheme = scheme_of(scheme, catalog)
        super().__init__(weights, scheme, **options)


def _dtype_name(dtype: Optional[torch.dtype]) -> Optional[str]:
    return None if dtype is None else str(dtype).removeprefix("torch.")


def _reprepare_after_load(module: "MXLinear", incompatible_keys: Any) -> None:
    module.refresh()


def _check_state_before_load(module: "MXLinear", state_dict: dict, prefix: str, *args: Any
                             ) -> None:
    """Refuse, before anything is copied, tensors that load_state_dict would silently convert
    (float codes cast into the uint8 buffers) or that the kernel cannot take."""
    from kernels.reference.fp8_tensor import check_act_scale

    for name in ("weight", "weight_scale", "input_scale", "bias"):
        key, mine = prefix + name, getattr(module, name)
        if key not in state_dict or mine is None:
            continue  # missing / unexpected keys: torch's own strict check reports them
        got = state_dict[key]
        if not isinstance(got, Tensor):
            raise ValueError(f"MXLinear.load_state_dict: {key} is a {type(got).__name__}, not a "
                             "tensor")
        if name in ("weight", "weight_scale"):
            ok = got.dtype == torch.uint8 and got.shape == mine.shape
            what = "element codes" if name == "weight" else "E8M0 bytes"
            want = f"uint8 {tuple(mine.shape)} ({what})"
        elif name == "bias":
            ok = got.dtype in ACT_DTYPES and got.shape == mine.shape
            want = f"float32 / bfloat16 / float16 {tuple(mine.shape)}"
        else:
            ok, want = got.is_floating_point() and got.numel() == 1, "one float32 element"
        if not ok:
            raise ValueError(f"MXLinear.load_state_dict: {key} is {got.dtype} {tuple(got.shape)}, "
                             f"expected {want}; load a state_dict saved from an MXLinear of the "
                             f"same scheme ({module.scheme.name}) and shape")
        if name == "input_scale":
            try:
                check_act_scale(got)
            except ValueError as e:
                raise ValueError(f"MXLinear.load_state_dict: {key}: {e}") from None


class MXLinear(nn.Module):
    """y = kernel(x, MX weight, bias) for one scheme; built by `quantize_model` or by hand.

    `weight`: a float [out_features, in_features] tensor (quantized here with the scheme's format
    and rounding) or an MXTensor of the scheme's weight key. `act_dtype` is the activation dtype
    the kernel is resolved for (default: the float weight's or the bias's dtype; None: any).
    `act_scale` / `calibration`: the static input scale of a static activation key (fp8), from a
    checkpoint or from a sample batch of this layer's inputs.
    """

    def __init__(self, weight: Tensor | MXTensor, scheme: Scheme | str, bias: Optional[Tensor] = None,
                 *, platform: str | Platform | None = None, strict: bool = False,
                 disabled: Iterable[str] = (), act_scale: Tensor | float | None = None,
                 calibration: Optional[Tensor] = None, act_dtype: Optional[torch.dtype] = None,
                 catalog: Optional[Catalog] = None, name: Optional[str] = None):
        super().__init__()
        self.scheme: Scheme = scheme_of(scheme, catalog)
        self.layer_name = name or f"MXLinear({self.scheme.name})"
        self.strict = bool(strict)
        self.disabled = tuple(disabled)
        if isinstance(weight, MXTensor):
            shape, device = weight.shape, weight.device
        elif isinstance(weight, Tensor) and weight.is_floating_point():
            shape, device = weight.shape, weight.device
            if weight.dtype not in ACT_DTYPES:
                raise ValueError(f"MXLinear weight has dtype {weight.dtype}; MX quantization "
                                 "takes float32, bfloat16 or float16: cast the layer first "
                                 "(e.g. linear.float())")
            act_dtype = act_dtype or weight.dtype
        else:
            got = weight.dtype if isinstance(weight, Tensor) else type(weight).__name__
            raise TypeError(f"MXLinear weight must be a float tensor or an MXTensor, got {got}")
        if len(shape) != 2:
            raise ValueError(f"MXLinear weight must be 2-D [out_features, in_features], got "
                             f"shape {tuple(shape)}")
        self.out_features, self.in_features = int(shape[0]), int(shape[1])
        if self.in_features % MX_BLOCK or self.in_features == 0:
            fix = -(-max(self.in_features, 1) // MX_BLOCK) * MX_BLOCK
            raise ValueError(f"MXLinear weight {tuple(shape)}: in_features {self.in_features} is "
                             f"not a positive multiple of the MX block {MX_BLOCK}; pad the layer "
                             f"to {fix} input features, or leave it unquantized (quantize_model "
                             "ignore=[...])")
        if bias is not None:
            if not isinstance(bias, Tensor) or bias.dtype not in ACT_DTYPES \
                    or tuple(bias.shape) != (self.out_features,) or bias.device != device:
                got = (f"{bias.dtype} {tuple(bias.shape)} on {bias.device}"
                       if isinstance(bias, Tensor) else type(bias).__name__)
                raise ValueError(f"MXLinear bias must be a float tensor of shape "
                                 f"({self.out_features},) (float32, bfloat16 or float16) on "
                                 f"{device}, got {got}")
            act_dtype = act_dtype or bias.dtype
        if act_dtype is not None and act_dtype not in ACT_DTYPES:
            raise ValueError(f"MXLinear act_dtype {act_dtype} is not float32, bfloat16 or float16")
        self.act_dtype: Optional[torch.dtype] = act_dtype
        here = layer_platform(device)
        if platform is not None and platform_of(platform) != here:
            raise ValueError(
                f"platform {platform_of(platform)} is not the platform of the weight's device "
                f"{device} ({here}): a layer runs its kernel where its tensors live; move the "
                f"weight to a {platform_of(platform)} device, or ask "
                f"registry.plan_quantization(model, scheme, platform='{platform_of(platform)}') "
                "for a what-if report"
            )
        self.resolution: Resolution = self._resolve(here, act_dtype)
        log_resolution(self.resolution, self.layer_name)
        self.kernel: LinearKernel = load_kernel(self.resolution.kernel)
        prepared = self.kernel.prepare(weight, self.scheme.contract, act_scale=act_scale,
                                       calibration=calibration)
        mx = prepared.weight
        self.weight_format, self.weight_rounding, self.weight_layout = mx.fmt, mx.rounding, mx.layout
        self.register_buffer("weight", mx.data)
        self.register_buffer("weight_scale", mx.scales)
        scale = prepared.act_scale
        self.register_buffer("input_scale", None if scale is None else scale.to(device))
        if bias is None:
            self.register_parameter("bias", None)
        else:
            self.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
        self._prepared: PreparedWeight = prepared
        self._register_handle()
        self.register_load_state_dict_pre_hook(_check_state_before_load)
        self.register_load_state_dict_post_hook(_reprepare_after_load)

    @classmethod
    def from_linear(cls, linear: nn.Linear, scheme: Scheme | str, **kwargs: Any) -> "MXLinear":
        """Quantize an nn.Linear's weight for `scheme` (its bias is copied, not quantized)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        bias = None if linear.bias is None else linear.bias.detach()
        return cls(linear.weight.detach(), scheme, bias, **kwargs)

    # -- what the layer is ----------------------------------------------------------------------

    @property
    def scheme_name(self) -> str:
        return self.scheme.name

    @property
    def kernel_name(self) -> str:
        return self.resolution.kernel

    @property
    def platform(self) -> Platform:
        return Platform.parse(self.resolution.platform, any_arch=True)  # detected: any arch

    @property
    def weight_mx(self) -> MXTensor:
        """The weight buffers as an MXTensor (shares their storage)."""
        return MXTensor(self.weight, self.weight_scale, self.weight_format, self.weight_rounding,
                        torch.Size((self.out_features, self.in_features)), self.weight_layout)

    def extra_repr(self) -> str:
        act = self.scheme.contract.activation
        parts = [f"in_features={self.in_features}", f"out_features={self.out_features}",
                 f"bias={self.bias is not None}", f"scheme={self.scheme.name}",
                 f"weight={self.scheme.contract.weight}",
                 f"activation={'none' if act is None else act}",
                 f"kernel={self.kernel_name}", f"platform={self.resolution.platform}"]
        if self.resolution.fallback:
            parts.append("fallback=True")
        return ", ".join(parts)

    # -- resolution and preparation -------------------------------------------------------------

    def _resolve(self, platform: Platform, act_dtype: Optional[torch.dtype]) -> Resolution:
        return resolve(self.scheme, platform, strict=self.strict, disabled=self.disabled,
                       shape=(self.out_features, self.in_features),
                       act_dtype=_dtype_name(act_dtype))

    def refresh(self) -> None:
        """Prepare the kernel's weight again from the current buffers (after editing them)."""
        self._prepared = self.kernel.prepare(self.weight_mx, self.scheme.contract,
                                             act_scale=self.input_scale)
        update_prepared(self._handle, self.kernel, self._prepared)

    def _register_handle(self) -> None:
        """Name (kernel, prepared) for the `ocp_mx::linear` op that torch.compile traces; the
        handle is released when the layer is garbage collected."""
        self._handle: int = register_prepared(self.kernel, self._prepared)
        weakref.finalize(self, release, self._handle)

    def __setstate__(self, state: dict) -> None:
        """A copy (copy.deepcopy, pickle) gets a handle of its own: the original's dies with it."""
        super().__setstate__(state)
        self._register_handle()

    def _apply(self, fn: Any, recurse: bool = True) -> "MXLinear":
        """Move / convert like any module, keep the byte buffers' dtypes, then re-resolve.

        The target device and activation dtype are read first (fn applied to an empty probe), and
        a platform or dtype the layer cannot run on is refused before any buffer moves."""
        old_device = self.weight.device
        probe = fn(torch.empty(0, dtype=self.act_dtype or torch.float32, device=old_device))
        act_dtype = None if self.act_dtype is None else probe.dtype
        if act_dtype is not None and act_dtype not in ACT_DTYPES:
            raise ValueError(f"MXLinear ({self.scheme.name}) cannot run {act_dtype} "
                             "activations; use float32, bfloat16 or float16")
        platform = layer_platform(probe.device)
        changed = platform != self.platform or act_dtype != self.act_dtype
        if changed:
            resolution = self._resolve(platform, act_dtype)
        kept = {k: self._buffers[k] for k in ("weight", "weight_scale", "input_scale")
                if self._buffers.get(k) is not None}
        super()._apply(fn, recurse)
        device = self.weight.device
        for key, before in kept.items():  # codes, scale bytes and the fp32 scale: no dtype change
            if self._buffers[key].dtype != before.dtype:
                self._buffers[key] = before.to(device)
        if changed:
            self.act_dtype = act_dtype
            self.resolution = resolution
            log_resolution(resolution, self.layer_name)
            self.kernel = load_kernel(resolution.kernel)
        self.refresh()
        return self

    # -- running --------------------------------------------------------------------------------

    def forward(self, x: Tensor) -> Tensor:
        prepared = self._prepared
        # Per call, so lean: prepare() keeps the buffer itself as the weight's codes, so the
        # identity test settles the usual case; the device comparison runs only when the buffer
        # was replaced behind the layer's back.
        if self._buffers["weight"] is not prepared.weight.data:
            self._check_prepared_device()
        return mx_linear(x, self.kernel, prepared, self._parameters["bias"], self._handle)

    def _check_prepared_device(self) -> None:
        prepared_on = self._prepared.weight.device
        if prepared_on != self.weight.device:
            raise RuntimeError(
                f"MXLinear ({self.scheme.name}): its buffers are on {self.weight.device} but its "
                f"kernel {self.kernel_name} was prepared on {prepared_on}; move the layer with "
                ".to(device) so it resolves its kernel again"
            )


__all__ = ["MXGroupedExperts", "MXLinear", "layer_platform", "platform_for_device", "scheme_of"]
