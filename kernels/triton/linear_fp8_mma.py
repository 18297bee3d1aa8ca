"""`triton-fp8-mma`: MXFP8 x MXFP8 on fp8 tensor cores that have no MX scales (Hopper, Ada).

Why: sm_90 has fp8 MMA but not the block-scaled MMA of sm_100, and no library ships an MXFP8
GEMM for it. The E8M0 scales are per 32 elements of K, exactly one fp8 MMA k-step, so each
program walks K in 32-wide slices: one fp8 `tl.dot` per slice (products exact, fp32
accumulation) and the slice's partial sums scaled by 2**(Ea[m] + Eb[n]) on the fp32
accumulator — the block scales of both operands applied where they are exact (powers of two).
The activation is quantized first by the Triton MX quantizer (the dispatcher's QDQ, so the fp8
codes x 2**Ea are the QDQ'd activation exactly); a NaN/Inf block (scale byte 0xFF) scales to NaN.

Numerics vs the reference (QDQ'd bf16 activation, fp32 weight, fp32 F.linear): the same exact
products; only the summation differs — the tensor core's own fp32 adds inside a 32-wide slice.
M <= 16 runs the emulation decode kernel instead (weight-read bound; the same numerics).
On sm_90, e4m3 x e4m3 with bf16 output runs the warp-specialized Gluon kernel of
linear_fp8_ws.py instead (gated: `linear_fp8_ws.VERIFIED`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernels.base import LinearKernel, PreparedWeight
from kernels.reference.linear import check_bias, check_input
from kernels.spec.formats import BLOCK, get_format
from kernels.triton import fit, launcher, linear_fp8_ws, mx_quant
from kernels.triton.linear_emulation import DECODE_MAX_M, fused_linear
from kernels.triton.mx_codec import KIND_OF_DTYPE, e8m0_value, store_fp32

_NAME = "triton-fp8-mma"


@triton.jit
def _fp8_mma_kernel(a_ptr, sa_ptr, b_ptr, sb_ptr, bias_ptr, out_ptr, M, N, K,
                    stride_a, stride_sa, stride_b, stride_sb, stride_o,
                    OUT_KIND: tl.constexpr, HAS_BIAS: tl.constexpr, HW_CAST: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    tl.static_assert((BLOCK_M & (BLOCK_M - 1)) == 0, "BLOCK_M must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_N & (BLOCK_N - 1)) == 0, "BLOCK_N must be a power of two (tl.arange)")
    tl.static_assert(GROUP_M >= 1, "GROUP_M must be at least 1")
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * grid_n  # programs of GROUP_M row-tiles share W tiles in L2
    group = pid // per_group
    first_m = group * GROUP_M
    size_m = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_c = tl.minimum(rows, M - 1).to(tl.int64)  # clamped: loads stay in bounds, no masks
    cols_c = tl.minimum(cols, N - 1).to(tl.int64)
    kk = tl.arange(0, 32)
    a_ptrs = a_ptr + rows_c[:, None] * stride_a + kk[None, :]
    b_ptrs = b_ptr + cols_c[:, None] * stride_b + kk[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kb in range(0, K // 32):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        sa = e8m0_value(tl.load(sa_ptr + rows_c * stride_sa + kb).to(tl.int32))
        sb = e8m0_value(tl.load(sb_ptr + cols_c * stride_sb + kb).to(tl.int32))
        part = tl.dot(a, tl.trans(b))
        acc += part * (sa[:, None] * sb[None, :])
        a_ptrs += 32
        b_ptrs += 32
    if HAS_BIAS:
        acc = acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    store_fp32(out_ptr + rows.to(tl.int64)[:, None] * stride_o + cols[None, :], acc, mask,
               OUT_KIND, HW_CAST)


@dataclass(frozen=True)
class MMAConfig:
    block_m: int
    block_n: int
    group_m: int
    warps: int
    stages: int


# H200 (docs/benchmarks.md); the interpreter takes small tiles so tails are covered.
GPU_CONFIG = MMAConfig(block_m=128, block_n=128, group_m=8, warps=8, stages=4)
INTERPRETER_CONFIG = MMAConfig(block_m=16, block_n=16, group_m=2, warps=1, stages=1)
_FP8_DTYPES = {"mxfp8_e4m3": torch.float8_e4m3fn, "mxfp8_e5m2": torch.float8_e5m2}
_CACHE_KEY = "triton_fp8_mma"


def fp8_mma_linear(x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None, *,
                   out_dtype: torch.dtype | None = None, config: MMAConfig | None = None
                   ) -> Tensor:
    """x [..., K] -> [..., N]: MX-quantize x (the contract's key), fp8 MMA per 32-wide K slice
    with both block scales on the fp32 accumulator, + bias, one cast to out_dtype."""
    check_input(x, prepared, _NAME)
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if out_dtype not in KIND_OF_DTYPE:
        raise ValueError(f"{_NAME}: out_dtype {out_dtype} is not float32, bfloat16 or float16")
    if not mx_quant._INTERPRETED and not x.is_cuda:
        raise ValueError(f"{_NAME}: input is on {x.device}; the Triton kernel needs a CUDA tensor")
    key = prepared.contract.activation
    wfmt = prepared.weight.fmt
    if key is None or key.static or key.format not in _FP8_DTYPES or wfmt not in _FP8_DTYPES:
        raise ValueError(f"{_NAME} runs MXFP8 weights x dynamic MXFP8 activations only, got "
                         f"{prepared.contract}; resolve the scheme again")
    n, k = prepared.out_features, prepared.in_features
    check_bias(bias, n, x.device, _NAME)
    lead = x.shape[:-1]
    x2d = x.reshape(-1, k)
    m = x2d.shape[0]
    if m <= DECODE_MAX_M:  # weight-read bound: the emulation decode kernel is the faster one
        return fused_linear(x, prepared, bias, out_dtype=out_dtype)
    if x2d.stride(1) != 1:
        x2d = x2d.contiguous()
    w = prepared.cache.get(_CACHE_KEY)
    if w is None:
        w = prepared.cache.setdefault(_CACHE_KEY, _weight_operands(prepared))
    a_codes, a_scales = mx_quant.quantize(x2d, get_format(key.format), key.scale.rounding)
    a = a_codes.view(_FP8_DTYPES[key.format])
    out = torch.empty((m, n), dtype=out_dtype, device=x.device)
    if ws_unavailable(x, key.format, wfmt, out_dtype) is None:  # the warp-specialized kernel
        _run_ws(a, a_scales, w, bias, out)
        return out.view(*lead, n)
    cfg = config or (INTERPRETER_CONFIG if mx_quant._INTERPRETED else GPU_CONFIG)
    bias32 = None if bias is None else bias.to(torch.float32).contiguous()

    def run(c) -> None:
        _fp8_mma_kernel[(triton.cdiv(m, c.block_m) * triton.cdiv(n, c.block_n),)](
            a, a_scales, w["codes"], w["scales"], bias32 if bias32 is not None else a_scales,
            mx_quant.bits_view(out), m, n, k, a.stride(0), a_scales.stride(0),
            w["codes"].stride(0), w["scales"].stride(0), out.stride(0),
            OUT_KIND=KIND_OF_DTYPE[out_dtype], HAS_BIAS=bias is not None,
            HW_CAST=not mx_quant._INTERPRETED, BLOCK_M=c.block_m, BLOCK_N=c.block_n,
            GROUP_M=c.group_m, num_warps=c.warps, num_stages=c.stages)

    fit.launch_fitting(_NAME, (x.device.index, out_dtype, bias is not None), cfg, run,
                       lambda c: fit.smaller_configs(c, stages="stages",
                                                     blocks=(("block_n", 16), ("block_m", 16))))
    return out.view(*lead, n)


def ws_unavailable(x: Tensor, afmt: str, wfmt: str, out_dtype: torch.dtype) -> str | None:
    """Why the warp-specialized Gluon kernel (linear_fp8_ws) cannot run a call (None: it can);
    the Triton kernel above runs it then."""
    if not linear_fp8_ws.VERIFIED:
        return "the warp-specialized fp8 kernel: written, not yet verified on a GPU"
    if afmt != "mxfp8_e4m3" or wfmt != "mxfp8_e4m3":
        return "e4m3 activations and weights only"
    if out_dtype != torch.bfloat16:
        return "bf16 output only"
    if mx_quant._INTERPRETED or not x.is_cuda or torch.version.hip is not None or \
            torch.cuda.get_device_capability(x.device) != (9, 0):
        return "sm_90 only (fp8 wgmma, TMA)"
    return None


def _run_ws(a: Tensor, a_scales: Tensor, w: dict, bias: Tensor | None, out: Tensor) -> None:
    """One launch of linear_fp8_ws's kernel: a [M, K] e4m3 codes, a_scales [M, K / 32]."""
    m, k = a.shape
    n = out.shape[1]
    block_n, stages = WS_CONFIG
    weight = w.get(("ws", block_n))
    if weight is None:  # the weight's descriptors: built once
        weight = w.setdefault(("ws", block_n), linear_fp8_ws.operands(w["codes"], w["scales"],
                                                                      block_n))
    act = linear_fp8_ws.operands(a, a_scales, linear_fp8_ws.BLOCK_M)
    bias32 = out if bias is None else bias.to(torch.float32).contiguous()
    grid = (launcher.cdiv(m, linear_fp8_ws.BLOCK_M), launcher.cdiv(n, block_n))
    linear_fp8_ws._fp8_ws_kernel[grid](*act, *weight, bias32, out, m, n, k,
                                      out.stride(0), HAS_BIAS=bias is not None, BLOCK_N=block_n,
                                      STAGES=stages, num_warps=4)


# (BLOCK_N, STAGES) of the warp-specialized kernel: 128 x 128 tiles, 4 stages (135 KB of shared
# memory, one CTA an SM): 0.56-0.64x bf16 at M = 1024 / 4096 on the H200 (2026-12-03, benchmarks
# part 15); other tiles not yet swept.
WS_CONFIG = (128, 4)


def _weight_operands(prepared: PreparedWeight) -> dict:
    weight = prepared.weight
    if weight.layout != "unpacked" or weight.data.shape[1] != prepared.in_features:
        raise ValueError(f"{_NAME}: weight codes must be one byte per element, got layout "
                         f"{weight.layout} and shape {tuple(weight.data.shape)}")
    if prepared.in_features % BLOCK:
        raise ValueError(f"{_NAME}: in_features {prepared.in_features} is not a multiple of "
                         f"{BLOCK}")
    return {"codes": weight.data.contiguous().view(_FP8_DTYPES[weight.fmt]),
            "scales": weight.scales.contiguous()}


class FP8MMALinear(LinearKernel):
    """MXFP8 x MXFP8 with fp8 tensor-core MMA per 32-wide K slice and the E8M0 scales on the
    fp32 accumulator (sm_89 / sm_90: fp8 MMA without MX block scaling)."""

    name = "triton-fp8-mma"

    def finish_prepare(self, prepared: PreparedWeight) -> None:
        prepared.cache[_CACHE_KEY] = _weight_operands(prepared)

    def apply(self, x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None) -> Tensor:
        return fp8_mma_linear(x, prepared, bias)


__all__ = ["FP8MMALinear", "fp8_mma_linear"]
