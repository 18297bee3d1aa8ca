"""`scaled-mm-mx`: W8A8 mxfp8_e4m3 and W4A4 mxfp4 linear layers through torch._scaled_mm.

not verified on hardware (no sm_100 machine available); layout unit-tested on CPU.

torch._scaled_mm with e8m0 block scales runs cuBLASLt's block-scaled GEMM on the tensor cores of
sm_100 / sm_120 GPUs. The quantized weight is prepared once (operand view + swizzled scales);
each call quantizes the activation with `kernels.mx.mx_quantize` (the contract's format and
rounding), swizzles its scales and calls the GEMM. Anywhere else the call is refused with an
error pointing at `registry resolve`, never run silently.

Facts used (and where they come from):
- [PT-SRC] pytorch aten/src/ATen/native/cuda/ScaledBlas.cpp (`is_blockwise_1x32_scaling`,
  `_scaled_mm_out_cuda`, `_scaled_gemm`) and aten/src/ATen/cuda/CUDABlas.cpp (`get_scale_mode`):
  float8 or `torch.float4_e2m1fn_x2` operands with `torch.float8_e8m0fnu` scales select
  BlockWise1x32 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 (needs CUDA >= 12.8); each scale
  tensor is contiguous with round_up(rows, 128) * round_up(ceil(K / 32), 4) elements (rows = M
  for mat1, N for mat2; K counted in elements, i.e. 2 x the packed fp4 width); mat1.size(1) % 16
  == 0 and both mat2 sizes % 16 == 0; "Only multiplication of row-major and column-major
  matrices is supported by cuBLASLt" (checked on sm_90, the layout every MX caller uses);
  `use_fast_accum` is refused for fp4; a bias is refused when out_dtype is float32. On ROCm
  the MX scales take another layout (unswizzled, or gfx950's 32 x 8 "EXT" tiles): refused here.
- [PT-TEST] pytorch test/test_scaled_matmul_cuda.py: `test_blockwise_mxfp8_nvfp4_mxfp4_numerics`
  calls `_scaled_mm(A, B.t(), to_blocked(A_scale), to_blocked(B_scale), ...)` with A [M, K]
  and B [N, K] both row-major (so mat2 = B.t() is column-major) and both scales computed per row
  along K; "MX gemm is only supported on CUDA capability 10.0+"; MXFP4 is skipped on sm_120
  ("MXFP4 on CUDA only supported on B200/B300"); `test_pack_uint4`: fp4x2 holds element 2i in
  the low nibble (our packed mxfp4 layout, kernels/spec/formats.py).
- [SCALE-LAYOUT] cuBLAS documentation, "1D Block Scaling Factors Layout", as restated by
  nvmath-python `get_block_scale_offset` (docs.nvidia.com/cuda/nvmath-python/latest/host-apis/
  linalg/generated/nvmath.linalg.advanced.helpers.matmul.get_block_scale_offset.html: worked
  offsets 82 and 593, block size being the only MXFP8/NVFP4 difference) and the cuDNN frontend
  note (nvidia.github.io/cudnn-frontend/mxfp8-scale-factor-128x4-layout/): the [rows, K/32]
  scale matrix is padded to 128-row x 4-column tiles; tiles are stored one after another, row
  tile major, K tile minor, 512 bytes each; inside a tile, scale (r, c) sits at byte
  (r % 32) * 16 + (r // 32) * 4 + c, i.e. the 128 x 4 tile is stored as 32 x 16.
- out_dtype: PyTorch and torchao (test/prototype/mx_formats/test_mx_mm.py) test bf16 output.
  We ask for float32 (public cuBLASLt VEC32_UE8M0 code also requests CUDA_R_32F D) so the bias is
  added in fp32 and the result rounded to x's dtype once, as the reference does; this is the
  first thing to confirm on an sm_100 machine (fallback: bf16 output with the bias passed in).
"""
from __future__ import annotations

import torch
from torch import Tensor

from kernels.base import LinearKernel, PreparedWeight
from kernels.mx import mx_quantize
from kernels.reference.linear import check_bias, check_input
from kernels.spec.formats import BLOCK

if not (hasattr(torch, "float8_e8m0fnu") and hasattr(torch, "float4_e2m1fn_x2")):
    raise ImportError(
        f"kernels.native.scaled_mm_mx needs the MX dtypes torch.float8_e8m0fnu and "
        f"torch.float4_e2m1fn_x2, which torch {torch.__version__} lacks; upgrade torch, or run "
        "`registry resolve <scheme>` to pick another kernel"
    )

SCALE_ROW_TILE = 128  # rows of one scale tile            [SCALE-LAYOUT]
SCALE_COL_TILE = 4  # scale columns (K blocks) per tile   [SCALE-LAYOUT]
SCALE_ROW_GROUP = 32  # a tile is stored as 32 x (4 * 4)   [SCALE-LAYOUT]
MIN_CAPABILITY = (10, 0)  # MX GEMM: sm_100+ (mxfp4: 10.x)  [PT-TEST]

#: MX element format -> the torch dtype cuBLAS reads the element bytes as, and the MXTensor
#: layout those bytes must be in.                          [PT-SRC] [PT-TEST]
OPERAND_DTYPES: dict[str, tuple[torch.dtype, str]] = {
    "mxfp8_e4m3": (torch.float8_e4m3fn, "unpacked"),
    "mxfp4": (torch.float4_e2m1fn_x2, "packed"),
}
GEMM_OUT_DTYPE = torch.float32  # see "out_dtype" in the module docstring


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def blocked_scales_numel(rows: int, k_blocks: int) -> int:
    """Elements of the swizzled scale tensor for a [rows, k_blocks] scale matrix."""
    return _round_up(rows, SCALE_ROW_TILE) * _round_up(k_blocks, SCALE_COL_TILE)


def _scale_bytes(scales: Tensor, what: str) -> Tensor:
    if not isinstance(scales, Tensor) or scales.dtype not in (torch.uint8, torch.float8_e8m0fnu):
        got = scales.dtype if isinstance(scales, Tensor) else type(scales).__name__
        raise ValueError(f"{what} must be a uint8 (or float8_e8m0fnu) tensor of E8M0 scale "
                         f"bytes, got {got}; pass MXTensor.scales")
    return scales.view(torch.uint8)


def to_blocked_scales(scales: Tensor, pad_value: int = 0) -> Tensor:
    """[rows, K // 32] E8M0 bytes -> the 1-D swizzled, padded layout cuBLAS reads (same dtype).

    Padding (rows up to a multiple of 128, columns up to a multiple of 4) holds `pad_value`;
    cuBLAS reads it for no output element (PyTorch pads with zero bytes too).
    """
    raw = _scale_bytes(scales, "to_blocked_scales: scales")
    if raw.dim() != 2 or raw.numel() == 0:
        raise ValueError(f"to_blocked_scales: scales must be 2-D [rows, K // {BLOCK}] and "
                         f"non-empty, got shape {tuple(raw.shape)}; flatten leading dims first")
    if not 0 <= int(pad_value) <= 255:
        raise ValueError(f"to_blocked_scales: pad_value {pad_value} is not a byte (0..255)")
    rows, cols = raw.shape
    padded_rows, padded_cols = _round_up(rows, SCALE_ROW_TILE), _round_up(cols, SCALE_COL_TILE)
    padded = raw.new_full((padded_rows, padded_cols), int(pad_value))
    padded[:rows, :cols] = raw
    # row = tile_r * 128 + quarter * 32 + lane, col = tile_c * 4 + slot
    tiles = padded.view(padded_rows // SCALE_ROW_TILE, SCALE_ROW_TILE // SCALE_ROW_GROUP,
                        SCALE_ROW_GROUP, padded_cols // SCALE_COL_TILE, SCALE_COL_TILE)
    # stored order: (tile_r, tile_c, lane, quarter, slot) -> byte lane * 16 + quarter * 4 + slot
    blocked = tiles.permute(0, 3, 2, 1, 4).contiguous().view(-1)
    return blocked.view(scales.dtype)


def from_blocked_scales(blocked: Tensor, rows: int, k_blocks: int) -> Tensor:
    """Inverse of `to_blocked_scales`: the 1-D swizzled bytes -> [rows, k_blocks] (same dtype)."""
    raw = _scale_bytes(blocked, "from_blocked_scales: blocked")
    if rows <= 0 or k_blocks <= 0:
        raise ValueError(f"from_blocked_scales: rows ({rows}) and k_blocks ({k_blocks}) must "
                         "be positive")
    want = blocked_scales_numel(rows, k_blocks)
    if raw.numel() != want:
        raise ValueError(f"from_blocked_scales: got {raw.numel()} bytes, but a [{rows}, "
                         f"{k_blocks}] scale matrix blocks into {want}; pass the rows / k_blocks "
                         "it was built from")
    padded_rows, padded_cols = _round_up(rows, SCALE_ROW_TILE), _round_up(k_blocks, SCALE_COL_TILE)
    tiles = raw.reshape(padded_rows // SCALE_ROW_TILE, padded_cols // SCALE_COL_TILE,
                        SCALE_ROW_GROUP, SCALE_ROW_TILE // SCALE_ROW_GROUP, SCALE_COL_TILE)
    padded = tiles.permute(0, 3, 2, 1, 4).reshape(padded_rows, padded_cols)
    return padded[:rows, :k_blocks].contiguous().view(blocked.dtype)


def _platform_name(device: torch.device) -> str:
    if device.type != "cuda":
        return device.type
    if getattr(torch.version, "hip", None):
        return f"rocm:{torch.cuda.get_device_properties(device).gcnArchName.split(':')[0]}"
    major, minor = torch.cuda.get_device_capability(device)
    return f"cuda:sm{major}{minor}"


def require_mx_gemm_device(device: torch.device, fmt: str = "mxfp8_e4m3") -> None:
    """RuntimeError unless `device` is a CUDA (not ROCm) GPU that runs `fmt` x `fmt` MX GEMMs:
    compute capability 10.0+, and for mxfp4 10.x only (B200 / B300)        [PT-TEST]."""
    device = torch.device(device)
    where = f"the tensors are on {device} (platform {_platform_name(device)})"
    if device.type != "cuda" or getattr(torch.version, "hip", None) \
            or torch.cuda.get_device_capability(device) < MIN_CAPABILITY:
        raise RuntimeError(
            "scaled-mm-mx runs torch._scaled_mm with MX block scales (cuBLAS, sm_100 / sm_120 "
            f"tensor cores), but {where}; run `registry resolve <scheme>` to pick a kernel for "
            "this platform (e.g. triton-dot-scaled or reference-emulation)"
        )
    if fmt == "mxfp4" and torch.cuda.get_device_capability(device)[0] != 10:
        raise RuntimeError(
            f"scaled-mm-mx: PyTorch runs mxfp4 x mxfp4 only on sm_100 / sm_103 (B200 / B300), "
            f"but {where}; run `registry resolve <scheme> --disable scaled-mm-mx` to pick "
            "another kernel"
        )


def native_scaled_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
                     out_dtype: torch.dtype) -> Tensor:
    """The hardware call: checks the device, then torch._scaled_mm. Tests replace this."""
    fmt = "mxfp4" if a.dtype == torch.float4_e2m1fn_x2 else "mxfp8_e4m3"
    require_mx_gemm_device(a.device, fmt)
    return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype, use_fast_accum=False)


class ScaledMMMXLinear(LinearKernel):
    """W8A8 mxfp8_e4m3 / W4A4 mxfp4 linear: dynamic MX activations x MX weights on cuBLAS.

    Numerics: the products code_a * 2^Ea * code_b * 2^Eb are exact in fp32 and accumulated in
    fp32; the bias is added in fp32 and the sum rounded once to x's dtype, like the reference.
    The reference first rounds the dequantized activation to x's dtype; the two agree except
    where such a value overflows x's dtype (|x| within a factor 2 of the dtype's max), which
    the reference turns into Inf and the GEMM keeps finite.
    """

    name = "scaled-mm-mx"
    weight_layout = None  # each format's default: packed mxfp4, unpacked mxfp8 (OPERAND_DTYPES)

    def finish_prepare(self, prepared: PreparedWeight) -> None:
        """Cache the weight as cuBLAS's column-major mat2 and its swizzled scales (once)."""
        weight = prepared.weight
        dtype, layout = OPERAND_DTYPES[weight.fmt]
        if weight.layout != layout:
            raise ValueError(f"{self.name}: the {weight.fmt} weight is in {weight.layout} layout, "
                             f"cuBLAS reads {layout}; quantize it with layout={layout!r}")
        data = weight.data.contiguous()  # [N, K] (fp8) or [N, K / 2] (fp4), row-major
        prepared.cache["mat2"] = data.view(dtype).t()  # [K(/2), N], column-major  [PT-TEST]
        prepared.cache["scale_b"] = to_blocked_scales(weight.scales).view(torch.float8_e8m0fnu)

    def apply(self, x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None) -> Tensor:
        check_input(x, prepared, self.name)
        if "mat2" not in prepared.cache:
            raise ValueError(f"{self.name}: the weight was not prepared by this kernel; call "
                             f"load_kernel({self.name!r}).prepare(weight, contract) first")
        n, k = prepared.out_features, prepared.in_features
        check_bias(bias, n, x.device, self.name)
        key = prepared.contract.activation
        dtype, _ = OPERAND_DTYPES[key.format]
        x2d = x.reshape(-1, k)
        if x2d.shape[0] == 0:  # no rows: the documented empty result (cuBLAS is not called)
            return torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)
        xq = mx_quantize(x2d, key.format, rounding=key.scale.rounding)  # contract's numerics
        mat1 = xq.data.view(dtype)  # [M, K(/2)], row-major
        scale_a = to_blocked_scales(xq.scales).view(torch.float8_e8m0fnu)
        out = native_scaled_mm(mat1, prepared.cache["mat2"], scale_a, prepared.cache["scale_b"],
                               GEMM_OUT_DTYPE)
        if bias is not None:
            out = out + bias.to(GEMM_OUT_DTYPE)
        return out.to(x.dtype).reshape(*x.shape[:-1], n)


__all__ = ["ScaledMMMXLinear", "to_blocked_scales", "from_blocked_scales",
           "blocked_scales_numel", "require_mx_gemm_device", "native_scaled_mm"]
