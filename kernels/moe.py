"""Public MoE layer: E experts with MX weights, top-k routing, one activation contract.

This layer takes a `SchemeContract` (or a scheme carrying one in `.contract`); a scheme *name*
is looked up by the registry layer above: `registry.MXGroupedExperts(weights, "w_mxfp4")`.

`MXGroupedExperts` holds E expert weights [E, N, K] as ONE stacked MXTensor (codes
[E, N, K-bytes] + e8m0 scales [E, N, K / 32]) and a scheme contract shared by every expert:
the weight key and the activation key (None: weight-only), exactly as a linear layer. The
activation QDQ is the activation-QDQ dispatcher's (kernels.dispatch.activation_qdq): the
reference calls it, the Triton kernel reproduces it bit for bit with the linear kernel's jit
helpers; a key the dispatcher does not know is an UnknownActivationKey when the layer is built,
never a silent pass-through (the vLLM bug where mxfp6 activation QDQ was skipped).

    out[t] = sum_k  w[t, k] * (QDQ(x[t]) @ W[ids[t, k]].T)      # fp32, one cast at the end

One expert is one linear layer; a SwiGLU expert MLP is three of these layers (gate, up, down).
Routing (kernels.reference.moe.route): top-k of the router logits; `renormalize=True` gives the
softmax over the top-k logits (weights sum to 1), False the full softmax read at the top-k.

The kernel is resolve's choice (kernels.select.resolve, kind "moe": triton-moe, one grouped
launch, on CUDA / ROCm; reference-moe, pure torch, anywhere), made when the layer is built for
the platform its weights live on (again after a move), with `strict` / `disabled` and
REGISTRY_STRICT / REGISTRY_DISABLED_KERNELS, its deviations logged once; `.resolution` keeps
it. The activation QDQ is resolve's qdq choice for the activation key (`.qdq_resolution`):
reference-moe runs it through the dispatcher, triton-moe runs triton-qdq's code inside its
launch (declared: it `uses` triton-qdq, so disabling triton-qdq refuses it). `backend=`
"triton" / "reference" forces both choices (a `forced` deviation; strict mode refuses it);
triton-moe runs on the CPU only forced and under TRITON_INTERPRET=1.

torch.compile (fullgraph=True): the routing is traced as torch ops and the experts run as one
`ocp_mx::grouped_experts` custom op (kernels/moe_op.py) keyed by the layer's handle; eager calls
run the kernel directly. Calls autograd records take the op too: its formula (the reference
kernel's gradients) serves every kernel, so a Triton kernel drops no gradient.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn

from kernels import choice, moe_op
from kernels.op_handles import takes_op
from kernels.base import static_scale
from kernels.dispatch import activation_qdq
from kernels.mx import FLOAT_DTYPES, MXTensor, check_device, mx_quantize
from kernels.reference.moe import check_routing, grouped_experts_reference, route
from kernels.select.resolve import Resolution, log_resolution, resolve
from kernels.spec.contract import HasContract, SchemeContract, contract_of
from kernels.spec.formats import BLOCK, FORMATS
from kernels.spec.platform import Platform, device_platform

#: The `backend=` values (from the moe declarations): "auto" and each kernel's short name.
BACKENDS: tuple[str, ...] = choice.backends("moe")
SchemeLike = HasContract | SchemeContract
ExpertWeights = Tensor | MXTensor | Sequence[MXTensor]
_is_compiling = torch.compiler.is_compiling
_WHERE = "MXGroupedExperts"


def _contract_of(scheme: SchemeLike) -> SchemeContract:
    contract = contract_of(scheme)
    if contract is not None:
        return contract
    if isinstance(scheme, str):
        raise TypeError(f"{_WHERE}: kernels.moe takes a SchemeContract (or a scheme carrying one "
                        f"in .contract), not the name {scheme!r}; for a scheme name or alias use "
                        f"registry.MXGroupedExperts(weights, {scheme!r}), which looks it up")
    raise TypeError(f"{_WHERE}: scheme must be a SchemeContract or a scheme carrying one in "
                    f".contract (a registry Scheme), got {type(scheme).__name__}")


def _stack_experts(weights: ExpertWeights, contract: SchemeContract) -> Tensor | MXTensor:
    """One MXTensor [E, N, K] in the contract's weight format and rounding, or the checked
    float weights [E, N, K] to quantize (once the layer's kernels are resolved)."""
    wkey = contract.weight
    if wkey.format not in FORMATS:
        raise ValueError(f"{_WHERE}: the weight key {wkey} is not an MX format; expert weights "
                         f"must be one of {', '.join(FORMATS)}")
    if isinstance(weights, Tensor):
        if weights.dim() != 3 or 0 in weights.shape:
            raise ValueError(f"{_WHERE}: float expert weights must be 3-D [experts, N, K], got "
                             f"shape {tuple(weights.shape)}")
        if weights.dtype not in FLOAT_DTYPES:
            raise ValueError(f"{_WHERE}: expert weights have dtype {weights.dtype}; pass float32, "
                             "bfloat16 or float16 (or MXTensors)")
        check_device(weights.device, f"{_WHERE}: expert weights")
        if weights.shape[2] % BLOCK:
            raise ValueError(f"{_WHERE}: expert weights [E, N, K] = {tuple(weights.shape)} have "
                             f"K={weights.shape[2]}, not a multiple of {BLOCK}; pad K")
        return weights
    if isinstance(weights, MXTensor):
        stacked = weights
    elif isinstance(weights, (list, tuple)) and weights and \
            all(isinstance(w, MXTensor) for w in weights):
        first = weights[0]
        for i, w in enumerate(weights):
            if w.device != first.device:
                raise ValueError(f"{_WHERE}: expert {i} is on {w.device} but expert 0 on "
                                 f"{first.device}; move every expert to one device")
            if len(w.shape) != 2 or (w.fmt, w.rounding, w.layout, w.shape) != \
                    (first.fmt, first.rounding, first.layout, first.shape):
                raise ValueError(f"{_WHERE}: expert {i} is {w.fmt}/{w.rounding}/{w.layout} "
                                 f"{tuple(w.shape)} but expert 0 is {first.fmt}/{first.rounding}/"
                                 f"{first.layout} {tuple(first.shape)}; every expert needs one "
                                 "2-D [N, K] shape, format, rounding and layout")
        stacked = MXTensor(torch.stack([w.data for w in weights]),
                           torch.stack([w.scales for w in weights]), first.fmt, first.rounding,
                           torch.Size((len(weights), *first.shape)), first.layout)
    elif isinstance(weights, (list, tuple)) and not weights:
        raise ValueError(f"{_WHERE}: the list of expert weights is empty; pass one MXTensor "
                         "[N, K] per expert (at least one)")
    else:
        raise TypeError(f"{_WHERE}: weights must be a float tensor [E, N, K], an MXTensor "
                        f"[E, N, K] or a list of MXTensors [N, K], got {type(weights).__name__}")
    if len(stacked.shape) != 3:
        raise ValueError(f"{_WHERE}: the expert MXTensor must be 3-D [experts, N, K], got shape "
                         f"{tuple(stacked.shape)}")
    if 0 in stacked.shape:
        raise ValueError(f"{_WHERE}: the expert MXTensor has shape {tuple(stacked.shape)}; "
                         "experts and N must be at least 1")
    check_device(stacked.device, f"{_WHERE}: expert weights")
    if stacked.fmt != wkey.format or stacked.rounding != wkey.scale.rounding:
        raise ValueError(f"{_WHERE}: expert weights are {stacked.fmt}/{stacked.rounding} but the "
                         f"contract's weight key is {wkey}; quantize them with the scheme's "
                         "format and rounding")
    return stacked


class MXGroupedExperts(nn.Module):
    """E MX experts [N, K] behind top-k routing; forward(x [..., K], router_logits [..., E],
    top_k) -> [..., N] in x's dtype. Built from float weights [E, N, K] (quantized here with
    the scheme's weight key), an MXTensor [E, N, K] or a list of E MXTensors [N, K].

    Static activation keys (fp8 per tensor) take `act_scale` (the checkpoint's input scale,
    shared by all experts) or `calibration` (a sample batch of activations). `strict` /
    `disabled` / `name` as for MXLinear: resolution switches, and the label of its log line."""

    def __init__(self, weights: ExpertWeights, scheme: SchemeLike, *, backend: str = "auto",
                 act_scale: Tensor | float | None = None, calibration: Tensor | None = None,
                 renormalize: bool = True, layout: str | None = None, strict: bool = False,
                 disabled: Iterable[str] = (), name: str | None = None) -> None:
        super().__init__()
        self.contract = _contract_of(scheme)
        self._scheme = scheme  # what resolve is asked about: its `.name` labels the messages
        self.backend = choice.check_backend("moe", backend, f"{_WHERE}: ")
        self.strict = bool(strict)
        self.disabled = tuple(disabled)
        label = getattr(scheme, "name", None) or str(self.contract)
        self.layer_name = name or f"{_WHERE}({label})"
        self.renormalize = bool(renormalize)
        if self.contract.activation is not None:
            activation_qdq(self.contract.activation)  # UnknownActivationKey: fail at build time
        mx = _stack_experts(weights, self.contract)
        self.num_experts, self.out_features, self.in_features = mx.shape
        scale = static_scale(self.contract, act_scale, calibration)
        self._platform: Platform | None = None
        self.resolution: Resolution
        self.qdq_resolution: Resolution | None
        self._resolve_for(device_platform(mx.device))  # refused here, before any quantization
        if isinstance(mx, Tensor):
            wkey = self.contract.weight
            mx = mx_quantize(mx, wkey.format, rounding=wkey.scale.rounding, layout=layout)
        self.fmt, self.rounding, self.layout = mx.fmt, mx.rounding, mx.layout
        self.register_buffer("weight_data", mx.data)
        self.register_buffer("weight_scales", mx.scales)
        self.register_buffer("act_scale", scale)
        self._triton_cache: dict = {}
        self._handle = moe_op.register_layer(self)  # what torch.compile's op names it by

    def __setstate__(self, state: dict) -> None:
        """A copy (copy.deepcopy, pickle) gets a handle of its own: the original's dies with it."""
        super().__setstate__(state)
        self._handle = moe_op.register_layer(self)

    @property
    def kernel_name(self) -> str:
        """The moe kernel that runs (resolve's choice, `.resolution`)."""
        return self.resolution.kernel

    @property
    def qdq_kernel(self) -> str | None:
        """The qdq kernel of the activations (None: weight-only): `.qdq_resolution`'s choice."""
        return None if self.qdq_resolution is None else self.qdq_resolution.kernel

    def _resolve_for(self, platform: Platform) -> None:
        """Resolve the moe kernel and the activation's qdq kernel for `platform` (strict,
        disabled, forced by `backend`) and log their deviations; ResolutionError when refused."""
        how = f"backend={self.backend!r}"
        res = resolve(self._scheme, platform, kind="moe", strict=self.strict,
                      disabled=self.disabled, force=choice.forced_kernel("moe", self.backend),
                      shape=(self.out_features, self.in_features), forced_by=how)
        qdq = None
        if self.contract.activation is not None:
            qdq = resolve(self.contract.activation, platform, kind="qdq", strict=self.strict,
                          disabled=self.disabled,
                          force=choice.forced_kernel("qdq", self.backend), forced_by=how)
        self.resolution, self.qdq_resolution, self._platform = res, qdq, platform
        log_resolution(res, self.layer_name)
        if qdq is not None:
            log_resolution(qdq, f"{self.layer_name} activation QDQ")

    @property
    def weight(self) -> MXTensor:
        """The stacked expert weights [E, N, K] (views of the module's buffers)."""
        return MXTensor(self.weight_data, self.weight_scales, self.fmt, self.rounding,
                        torch.Size((self.num_experts, self.out_features, self.in_features)),
                        self.layout)

    def extra_repr(self) -> str:
        return (f"experts={self.num_experts}, in_features={self.in_features}, "
                f"out_features={self.out_features}, contract={self.contract}, "
                f"backend={self.backend}, kernel={self.kernel_name}, qdq={self.qdq_kernel}, "
                f"platform={self.resolution.platform}, renormalize={self.renormalize}")

    def forward(self, x: Tensor, router_logits: Tensor, top_k: int, *,
                out_dtype: torch.dtype | None = None) -> Tensor:
        """Route by the logits (kernels.reference.moe.route), then run the experts."""
        x2d, lead = self._check_x(x)
        if not isinstance(router_logits, Tensor) or router_logits.dim() == 0 or \
                router_logits.shape[-1] != self.num_experts:
            got = tuple(router_logits.shape) if isinstance(router_logits, Tensor) else \
                type(router_logits).__name__
            raise ValueError(f"{_WHERE}: router_logits {got} must end in the number of experts "
                             f"E={self.num_experts}")
        if router_logits.device != x.device:
            raise ValueError(f"{_WHERE}: router_logits are on {router_logits.device} but x on "
                             f"{x.device}; move the logits to x's device")
        if router_logits.shape[:-1] != lead:
            raise ValueError(f"{_WHERE}: router_logits {tuple(router_logits.shape)} and x "
                             f"{tuple(x.shape)} must share the token dims {tuple(lead)}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or \
                not 1 <= top_k <= self.num_experts:
            raise ValueError(f"{_WHERE}: top_k={top_k!r} must be an int in [1, "
                             f"{self.num_experts}] (the number of experts)")
        ids, weights = route(router_logits.reshape(-1, self.num_experts), top_k,
                             renormalize=self.renormalize)
        return self._experts(x2d, ids, weights, out_dtype).view(*lead, self.out_features)

    def forward_routed(self, x: Tensor, topk_ids: Tensor, topk_weights: Tensor, *,
                       out_dtype: torch.dtype | None = None) -> Tensor:
        """Run the experts for routing computed elsewhere: ids / weights [..., top_k]."""
        x2d, lead = self._check_x(x)
        tokens = x2d.shape[0]
        for name, t in (("topk_ids", topk_ids), ("topk_weights", topk_weights)):
            if not isinstance(t, Tensor) or t.dim() == 0 or t.shape[:-1] != lead:
                got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ValueError(f"{_WHERE}: {name} {got} must be [{', '.join(map(str, lead))}"
                                 f"{', ' if lead else ''}top_k] (x's token dims, then top_k)")
        traced = _is_compiling()  # the ids' range needs their values: the op checks it then
        ids, weights = check_routing(topk_ids.reshape(tokens, -1), topk_weights.reshape(tokens, -1),
                                     tokens, self.num_experts, check_range=not traced)
        return self._experts(x2d, ids.to(x.device), weights.to(x.device), out_dtype,
                             check_range=traced).view(*lead, self.out_features)

    # ------------------------------------------------------------------------- internals
    def _check_x(self, x: Tensor) -> tuple[Tensor, torch.Size]:
        if not isinstance(x, Tensor) or x.dim() == 0 or x.shape[-1] != self.in_features:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{_WHERE}: x {got} must end in in_features K={self.in_features}")
        if x.dtype not in FLOAT_DTYPES:
            raise ValueError(f"{_WHERE}: x has dtype {x.dtype}; pass float32, bfloat16 or "
                             "float16 activations")
        check_device(x.device, f"{_WHERE}: x")
        if x.device != self.weight_data.device:
            raise ValueError(f"{_WHERE}: x is on {x.device} but the expert weights on "
                             f"{self.weight_data.device}; move them to one device (module.to)")
        return x.reshape(-1, self.in_features), x.shape[:-1]

    def _experts(self, x2d: Tensor, ids: Tensor, weights: Tensor, out_dtype: torch.dtype | None,
                 *, check_range: bool = False) -> Tensor:
        """The experts for routed tokens: the `ocp_mx::grouped_experts` op while torch.compile
        traces and where autograd records the call (kernels/moe_op.py: one gradient formula for
        every kernel), else `run_routed` directly (no op dispatch per call)."""
        if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
            raise ValueError(f"{_WHERE}: out_dtype {out_dtype} is not float32, bfloat16 or "
                             "float16")
        if takes_op(x2d, weights):
            return torch.ops.ocp_mx.grouped_experts(
                x2d, self.weight_data, self.weight_scales, self.act_scale, ids, weights,
                check_range, self._handle, out_dtype)
        return self.run_routed(x2d, ids, weights, out_dtype, check_range=check_range)

    def run_routed(self, x2d: Tensor, ids: Tensor, weights: Tensor,
                   out_dtype: torch.dtype | None, *, check_range: bool = False) -> Tensor:
        """x [T, K], checked routing [T, top_k] (its ids' range too when `check_range`) ->
        [T, N]: the kernel resolved for where x is (again if the layer moved)."""
        if check_range:
            check_routing(ids, weights, x2d.shape[0], self.num_experts)
        platform = device_platform(x2d.device)
        if platform != self._platform:  # the layer moved: resolve again for where it runs now
            self._resolve_for(platform)
        args = (x2d, self.weight, self.contract.activation, self.act_scale, ids, weights,
                out_dtype)
        return _RUNNERS[self.resolution.kernel](self, args, x2d.device)

    def _run_reference(self, args: tuple, device: torch.device) -> Tensor:
        return grouped_experts_reference(*args, qdq=self.qdq_kernel or "reference-qdq")

    def _run_triton(self, args: tuple, device: torch.device) -> Tensor:
        run = choice.implementation("triton-moe")  # kernels.triton.moe_grouped, imported now
        module = sys.modules[run.__module__]
        key = (self.weight_data.data_ptr(), str(device))
        consts = self._triton_cache.get(key)
        if consts is None:  # once per weight storage: the constexprs and kernel-ready views
            consts = module.kernel_constexprs(self.weight, self.contract.activation,
                                              self.act_scale)
            self._triton_cache = {key: consts}  # one atomic swap: safe with concurrent callers
        return run(*args, constexprs=consts)


#: How each moe kernel (kernels.select.declarations.MOE_KERNELS) runs in the layer.
_RUNNERS = {"reference-moe": MXGroupedExperts._run_reference,
            "triton-moe": MXGroupedExperts._run_triton}


__all__ = ["BACKENDS", "MXGroupedExperts"]
