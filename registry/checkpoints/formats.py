"""The producers' stored MX tensors <-> kernels.mx.MXTensor, both ways, bit for bit.

Why: a Quark, compressed-tensors, AutoRound or gpt-oss checkpoint stores the same MX numbers
as our MXTensor (E2M1 / E2M3 / E3M2 / E4M3 / E5M2 codes + one E8M0 byte per 32 elements of a
row) under its own names, dtypes and packings. Converting is renaming, reshaping and
reinterpreting bytes: never re-quantizing. The layouts were read in each producer's own code
(docs/checkpoints.md) and are checked against it in tests/registry/checkpoints/.

Public API (stable; helper modules and the writer import it):

    FORMATS: dict[str, CheckpointFormat]   # "quark", "compressed-tensors", "auto-round", "gpt-oss"
    get_format(name) -> CheckpointFormat    # one-line ValueError listing the names
    format_for_quant_method(quant_method) -> CheckpointFormat   # config.json's quant_method

    fmt = FORMATS["compressed-tensors"]
    fmt.tensor_names(layer, "mxfp4") -> LayerTensors(layer, codes=..., scales=...)
    fmt.layers(names) -> list[str]           # quantized layers among stored tensor names
    fmt.to_mx(layer, get_tensor, weight) -> MXTensor      # get_tensor(name) -> Tensor
    fmt.from_mx(layer, mx, weight=None) -> dict[str, Tensor]   # the producer's tensors

`layer` is the module path ("model.layers.0.mlp.down_proj"); for gpt-oss it is the stem of the
`*_blocks` / `*_scales` pair ("model.layers.0.mlp.experts.gate_up_proj"). `weight` is a
registry Scheme, a SchemeContract or the weight QuantKey: it names the element format (the
stored bytes cannot tell E2M3 from E3M2) and the rounding recorded in the MXTensor. Any other
tensor of a layer (bias, input scales) is not touched here: the caller copies it as stored.

Every refusal is one line naming the tensor, what it holds and what was expected.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

import torch
from torch import Tensor

from kernels.mx import MXTensor
from kernels.reference.packing import pack_codes, unpack_codes
from kernels.spec.contract import QuantKey, contract_of
from kernels.spec.formats import BLOCK, DEFAULT_LAYOUT, bytes_per_row, get_format as get_elem_format

GetTensor = Callable[[str], Tensor]

#: torch dtype of one stored 8-bit code, by MX element format (the fp8 formats only).
FP8_DTYPES: dict[str, torch.dtype] = {"mxfp8_e4m3": torch.float8_e4m3fn,
                                      "mxfp8_e5m2": torch.float8_e5m2}
SCALE_DTYPES: tuple[torch.dtype, ...] = (torch.uint8, torch.float8_e8m0fnu)


class CheckpointFormatError(ValueError):
    """A stored tensor does not hold what its format says (one line: tensor, got, expected)."""


@dataclass(frozen=True)
class LayerTensors:
    """The stored names of one quantized layer's element codes and E8M0 scales."""

    layer: str
    codes: str
    scales: str


def weight_key(weight: Any) -> QuantKey:
    """The weight QuantKey of a Scheme / SchemeContract / QuantKey (TypeError otherwise)."""
    if isinstance(weight, QuantKey):
        return weight
    contract = contract_of(weight)
    if contract is not None:
        return contract.weight
    raise TypeError(f"weight must be a registry Scheme, a SchemeContract or a QuantKey, got "
                    f"{type(weight).__name__}")


def _dtype_name(t: Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


@dataclass(frozen=True)
class CheckpointFormat:
    """One producer's storage of MX linear weights: names, dtypes, packing.

    name: our name for the format; quant_method: config.json's `quant_method`; elements: the MX
    element formats it stores; codes_suffix: per element bit width, the codes tensor's suffix
    (".weight", ".weight_packed"); scales_suffix: ".weight_scale"."""

    name: str
    quant_method: str
    elements: tuple[str, ...]
    codes_suffix: Mapping[int, str]
    scales_suffix: str = ".weight_scale"
    experts_only: bool = False  # gpt-oss: 3-D [E, N, ...] expert stacks

    # -- names -----------------------------------------------------------------------------

    def check_element(self, fmt: str, layer: str = "") -> None:
        """Refuse an element format this producer does not store (one line)."""
        if fmt not in self.elements:
            where = f"{layer}: " if layer else ""
            raise CheckpointFormatError(
                f"{where}the {self.name} checkpoint format stores {', '.join(self.elements)} "
                f"weights, not {fmt}; choose a scheme with one of those weight formats or another "
                "checkpoint format")

    def tensor_names(self, layer: str, fmt: str) -> LayerTensors:
        """Where `layer`'s codes and scales are stored for element format `fmt`."""
        self.check_element(fmt, layer)
        bits = get_elem_format(fmt).bits
        return LayerTensors(layer, layer + self.codes_suffix[bits], layer + self.scales_suffix)

    def layers(self, names: Iterable[str]) -> list[str]:
        """The layers among stored tensor `names` that hold MX weights: every name ending in
        the scales suffix, by its prefix (whether the codes are there too is checked later)."""
        suffix = self.scales_suffix
        return sorted(n[: -len(suffix)] for n in names if n.endswith(suffix))

    def claimed(self, layer: str) -> tuple[str, ...]:
        """Every tensor name this format may store for `layer`'s quantized weight."""
        return tuple(dict.fromkeys([layer + s for s in self.codes_suffix.values()]
                                   + [layer + self.scales_suffix]))

    # -- stored -> MXTensor ------------------------------------------------------------------

    def to_mx(self, layer: str, get_tensor: GetTensor, weight: Any) -> MXTensor:
        """The MXTensor of `layer`'s stored codes and scales in the element format's default
        layout (kernels.spec.formats.DEFAULT_LAYOUT; no re-quantizing: bytes are reinterpreted,
        reshaped, and fp6 codes unpacked one a byte)."""
        key = weight_key(weight)
        names = self.tensor_names(layer, key.format)
        codes, scales = get_tensor(names.codes), get_tensor(names.scales)
        return self.mx_from_tensors(names, codes, scales, key)

    def mx_from_tensors(self, names: LayerTensors, codes: Tensor, scales: Tensor,
                        key: QuantKey) -> MXTensor:
        """`to_mx` on tensors already read (inspect reads them once)."""
        fmt = key.format
        scales = self.scale_bytes(names.scales, scales)
        codes = self.code_bytes(names, codes, scales, fmt)
        k = scales.shape[-1] * BLOCK
        elem = get_elem_format(fmt)
        shape = torch.Size((*scales.shape[:-1], k))
        layout = DEFAULT_LAYOUT[fmt]
        if elem.bits < 8 and layout == "unpacked":  # fp6: stored packed, our default unpacked
            codes = unpack_codes(codes.view(-1, codes.shape[-1]), elem, "packed", k).view(shape)
        return MXTensor(codes, scales, fmt, key.scale.rounding or "even", shape, layout)

    def scale_bytes(self, name: str, scales: Tensor) -> Tensor:
        """E8M0 bytes as uint8, [..., K / 32]."""
        if scales.dtype not in SCALE_DTYPES:
            raise CheckpointFormatError(
                f"{name}: {_dtype_name(scales)} {tuple(scales.shape)}, expected uint8 (or "
                "float8_e8m0fnu) E8M0 bytes, one per 32 weights of a row; this is not an MX "
                "scale: check the config's weight format for this layer")
        dims, shown = ((3,), "[E, N, K/32]") if self.experts_only else \
            ((2, 3), "[N, K/32] (or [E, N, K/32] for experts)")
        if scales.dim() not in dims or 0 in scales.shape:
            raise CheckpointFormatError(f"{name}: shape {tuple(scales.shape)}, expected {shown}")
        return scales.view(torch.uint8)

    def code_bytes(self, names: LayerTensors, codes: Tensor, scales: Tensor, fmt: str) -> Tensor:
        """Element codes as uint8 in our layout, checked against the scales' shape."""
        elem = get_elem_format(fmt)
        k = scales.shape[-1] * BLOCK
        if elem.bits == 8:
            want_dtype = FP8_DTYPES.get(fmt, torch.int8 if elem.is_int else None)
        else:
            want_dtype = torch.uint8
        width = bytes_per_row(elem, "packed" if elem.bits < 8 else "unpacked", k)
        want = (*scales.shape[:-1], width)
        got = codes.reshape(*codes.shape[:-2], -1) if self.experts_only and codes.dim() == 4 \
            else codes
        if codes.dtype != want_dtype or tuple(got.shape) != want:
            raise CheckpointFormatError(
                f"{names.codes}: {_dtype_name(codes)} {tuple(codes.shape)}, expected "
                f"{str(want_dtype).removeprefix('torch.')} {self.stored_codes_shape(want, elem.bits)} "
                f"({fmt} codes of K={k} per row, as {names.scales} {tuple(scales.shape)} says)")
        return got.contiguous().view(torch.uint8)

    def stored_codes_shape(self, shape: tuple[int, ...], bits: int) -> tuple[int, ...]:
        """The stored codes' shape for our [..., bytes] shape."""
        return tuple(shape)

    # -- MXTensor -> stored ------------------------------------------------------------------

    def from_mx(self, layer: str, mx: MXTensor, weight: Optional[Any] = None) -> dict[str, Tensor]:
        """The producer's tensors (name -> tensor) for `layer`'s MX weight `mx`; `weight` (a
        Scheme / contract / QuantKey), when given, must name mx's element format."""
        if not isinstance(mx, MXTensor):
            raise TypeError(f"{layer}: from_mx takes an MXTensor, got {type(mx).__name__}")
        if weight is not None and weight_key(weight).format != mx.fmt:
            raise CheckpointFormatError(
                f"{layer}: the MXTensor holds {mx.fmt} codes but the scheme's weight key is "
                f"{weight_key(weight)}; pass the scheme the weight was quantized with")
        names = self.tensor_names(layer, mx.fmt)
        if self.experts_only and len(mx.shape) != 3:
            raise CheckpointFormatError(
                f"{layer}: {self.name} stores expert stacks [E, N, K], got an MXTensor of shape "
                f"{tuple(mx.shape)}")
        if not self.experts_only and len(mx.shape) not in (2, 3):
            raise CheckpointFormatError(
                f"{layer}: {self.name} stores [N, K] weights (or [E, N, K] experts), got shape "
                f"{tuple(mx.shape)}")
        elem = mx.elem_format
        data = mx.data.contiguous()
        if elem.bits < 8 and mx.layout == "unpacked":
            k = mx.shape[-1]
            data = pack_codes(data.view(-1, k), elem, "packed").view(*mx.shape[:-1], -1)
        if elem.bits == 8 and mx.fmt in FP8_DTYPES:
            data = data.view(FP8_DTYPES[mx.fmt])
        elif elem.is_int:
            data = data.view(torch.int8)
        return {names.codes: self.stored_codes(data, elem.bits),
                names.scales: mx.scales.contiguous().clone()}

    def stored_codes(self, data: Tensor, bits: int) -> Tensor:
        return data.clone()


@dataclass(frozen=True)
class GptOssFormat(CheckpointFormat):
    """gpt-oss (`quant_method: "mxfp4"`): `{stem}_blocks` uint8 [E, N, K/32, 16] (two E2M1
    codes a byte, element 2i in the low nibble) and `{stem}_scales` uint8 [E, N, K/32]."""

    def tensor_names(self, layer: str, fmt: str) -> LayerTensors:
        self.check_element(fmt, layer)
        return LayerTensors(layer, layer + "_blocks", layer + "_scales")

    def layers(self, names: Iterable[str]) -> list[str]:
        return sorted(n[: -len("_scales")] for n in names if n.endswith("_scales"))

    def claimed(self, layer: str) -> tuple[str, ...]:
        return (layer + "_blocks", layer + "_scales")

    def stored_codes_shape(self, shape: tuple[int, ...], bits: int) -> tuple[int, ...]:
        return (*shape[:-1], shape[-1] // 16, 16)

    def stored_codes(self, data: Tensor, bits: int) -> Tensor:
        return data.reshape(*data.shape[:-1], data.shape[-1] // 16, 16).clone()


FORMATS: dict[str, CheckpointFormat] = {
    f.name: f for f in (
        # quark/torch/utils/pack.py Pack_fp4 / Pack_fp6; fp8 as float8 dtypes; e8m0 uint8 scale.
        CheckpointFormat("quark", "quark",
                         ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2"),
                         {4: ".weight", 6: ".weight", 8: ".weight"}),
        # compressed_tensors/compressors/{mxfp4,mxfp6,mxfp8}: mxfp{4,6}-pack-quantized, mxfp8-quantized.
        CheckpointFormat("compressed-tensors", "compressed-tensors",
                         ("mxfp4", "mxfp6_e2m3", "mxfp8_e4m3"),
                         {4: ".weight_packed", 6: ".weight_packed", 8: ".weight"}),
        # auto_round/export/export_to_autoround/qlinear_fp.py (packing_format auto_round:mx_fp).
        CheckpointFormat("auto-round", "auto-round", ("mxfp4", "mxfp8_e4m3"),
                         {4: ".weight_packed", 8: ".weight"}),
        # transformers/integrations/mxfp4.py (gpt-oss): experts only.
        GptOssFormat("gpt-oss", "mxfp4", ("mxfp4",), {4: "_blocks"}, "_scales",
                     experts_only=True),
    )
}

#: config.json `quant_method` spellings -> our format name.
_QUANT_METHODS = {"quark": "quark", "compressed-tensors": "compressed-tensors",
                  "auto-round": "auto-round", "auto_round": "auto-round", "intel/auto-round":
                  "auto-round", "mxfp4": "gpt-oss"}


def get_format(name: str) -> CheckpointFormat:
    """The checkpoint format called `name`, or a one-line ValueError listing the names."""
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown checkpoint format {name!r}; known formats: "
                         f"{', '.join(FORMATS)}") from None


def format_for_quant_method(quant_method: Any) -> CheckpointFormat:
    """The format of a config.json whose quantization_config.quant_method is `quant_method`."""
    name = _QUANT_METHODS.get(quant_method) if isinstance(quant_method, str) else None
    if name is None:
        raise ValueError(f"quant_method {quant_method!r} names no checkpoint format read here; "
                         f"known: {', '.join(sorted(_QUANT_METHODS))}")
    return FORMATS[name]


__all__ = ["FORMATS", "FP8_DTYPES", "CheckpointFormat", "CheckpointFormatError", "GetTensor",
           "GptOssFormat", "LayerTensors", "format_for_quant_method", "get_format", "weight_key"]
