"""`triton-emulation`: every MX weight x activation contract, emulated fast on any GPU.

Why: emulation is the path of every contract no native kernel takes (mxfp6 and mxint8
weights, mxfp6 / mxint8 / fp8-static activations, MX on Hopper, ...), so it must run them all,
at every batch size, close to the bf16 speed of the same shape. One contract, three strategies
picked by the number of activation rows M (`strategy_for`; the same numerics in each: the
dispatcher's activation QDQ bit for bit, the weight decoded exactly, fp32 accumulation):
  "decode"  M <= 16 (mxfp4: M <= 64 on a GPU): linear_decode.py, one program per weight-row
            stripe and K slice (weight-read bound);
  "tiled"   one fused kernel: activation QDQ + weight dequant in registers + tl.dot, nothing
            dequantized ever reaches memory (tiles and numerics in linear_tiles.py);
  "dequant-gemm" M >= DEQUANT_GEMM_MIN_M with bf16 activations on a GPU: the Triton QDQ of
            the activation and a Triton dequantization of the weight to bf16 (both exact), then
            cuBLAS bf16 GEMM (fp32 accumulation) — the extra weight pass is a few percent of a
            compute-bound GEMM, and cuBLAS's GEMM is the fastest there is. The bf16 weight is a
            per-call scratch tensor, never kept.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import Tensor

from kernels.base import LinearKernel, PreparedWeight
from kernels.dispatch import activation_qdq
from kernels.mx import mx_dequantize
from kernels.reference.linear import check_bias, check_input
from kernels.triton.mx_codec import KIND_OF_DTYPE, store_fp32
from kernels.triton.mx_tiles import act_tile, weight_tile
from kernels.triton import (eager_path, fit, launcher, linear_configs, linear_decode, linear_gemv,
                            linear_mma, linear_wgmma, mx_quant, qdq_plan, wgmma_gates)
from kernels.triton.route import route_words
from kernels.triton.wgmma_tiles import act_facts
from kernels.triton.linear_tiles import KERNEL_NAME as _NAME
from kernels.select.activation_keys import MX_DYNAMIC_KEYS
from kernels.triton.linear_tiles import (  # noqa: F401  (ACT_* / DOT_*: part of this module's API)
    ACT_FP8_STATIC, ACT_MX, ACT_NONE, DOT_BF16, DOT_FP32, dot_choice, prepare_tensors,
)


@triton.jit
def _emulated_linear_kernel(
        x_ptr, w_data_ptr, w_scale_ptr, s_ptr, bias_ptr, out_ptr, M, N, K,
        stride_x, stride_wd, stride_ws, stride_o,
        IN_KIND: tl.constexpr, OUT_KIND: tl.constexpr, HAS_BIAS: tl.constexpr,
        ACT_MODE: tl.constexpr, A_MBITS: tl.constexpr, A_BIAS: tl.constexpr,
        A_EMAX: tl.constexpr, A_MAX_NORMAL: tl.constexpr, A_MAXN_MANT: tl.constexpr,
        A_MAXN_SUB: tl.constexpr, A_IS_INT: tl.constexpr, A_ROUNDING: tl.constexpr,
        W_MBITS: tl.constexpr, W_BIAS: tl.constexpr, W_BITS: tl.constexpr,
        W_IS_INT: tl.constexpr, W_SPECIALS: tl.constexpr, W_PACK: tl.constexpr,
        W_SAT: tl.constexpr,
        DOT_KIND: tl.constexpr, DOT_PRECISION: tl.constexpr, HW_CAST: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tl.static_assert(BLOCK_K % 32 == 0, "BLOCK_K must hold whole 32-element MX blocks")
    tl.static_assert((BLOCK_M & (BLOCK_M - 1)) == 0, "BLOCK_M must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_N & (BLOCK_N - 1)) == 0, "BLOCK_N must be a power of two (tl.arange)")
    tl.static_assert((BLOCK_K & (BLOCK_K - 1)) == 0, "BLOCK_K must be a power of two (tl.arange)")
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        a = act_tile(x_ptr, stride_x, s_ptr, M, K, pid_m, kk, IN_KIND, ACT_MODE, A_MBITS,
                     A_BIAS, A_EMAX, A_MAX_NORMAL, A_MAXN_MANT, A_MAXN_SUB, A_IS_INT,
                     A_ROUNDING, HW_CAST, BLOCK_M, BLOCK_K)
        w = weight_tile(w_data_ptr, w_scale_ptr, stride_wd, stride_ws, N, K, pid_n, kk,
                        W_MBITS, W_BIAS, W_BITS, W_IS_INT, W_SPECIALS, W_PACK, W_SAT, BLOCK_N,
                        BLOCK_K)
        if DOT_KIND == 0:
            acc = tl.dot(a.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)), acc)
        else:
            acc = tl.dot(a, tl.trans(w), acc, input_precision=DOT_PRECISION)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if HAS_BIAS:
        acc = acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    store_fp32(out_ptr + rows.to(tl.int64)[:, None] * stride_o + cols[None, :], acc,
               (rows < M)[:, None] & (cols < N)[None, :], OUT_KIND, HW_CAST)


# ----------------------------------------------------------------------------- launch set-up
_INTERPRETED = mx_quant._INTERPRETED
DECODE_LIMIT_M = 64  # the most rows the decode kernel takes (forced: tools/tune_linear.py)
# M <= this: the weight read bounds the time, whatever kernel (linear_fp8_mma hands such calls
# to this kernel's small-M strategies)
DECODE_MAX_M = 16
STRATEGIES = ("wgmma", "gemv", "mma", "decode", "tiled", "dequant-gemm")
# Tiled kernel (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages); BLOCK_K a multiple of 64 keeps
# fp4 bytes and fp6 words whole. H200 measurements: docs/benchmarks.md.
GPU_TILE = (64, 128, 64, 4, 3)
# Interpreter: small tiles so the tests cover N, K and M tails and the K loop.
INTERPRETER_TILE = (32, 32, 64, 1, 1)

_CACHE_KEY = "triton_emulation"


def strategy_for(m: int, x_dtype: torch.dtype, out_dtype: torch.dtype, bias: Tensor | None,
                 on_gpu: bool, consts: dict, skip: tuple[str, ...] = (), *,
                 n: int, k: int) -> tuple[str, object]:
    """(strategy, config) that runs M activation rows — all give the same numerics: the row of
    linear_configs.TABLE that matches (strategies in `skip` and rows still gated off passed
    over), else dequant-gemm (bf16 on a GPU) or tiled."""
    row = linear_configs.choose(linear_configs.weight_family(consts), m, not on_gpu, skip, n=n,
                                k=k, passed_over=wgmma_gates.passed_over)
    if row is not None:
        return row.strategy, row.config
    if on_gpu and x_dtype == out_dtype == torch.bfloat16 and (
            bias is None or bias.dtype == torch.bfloat16):
        return "dequant-gemm", None
    return "tiled", None


@dataclass(frozen=True)
class _Plan:
    """How calls of one (M bucket, x dtype, out dtype, bias dtype, device) run, built once."""

    strategy: str
    config: object
    mma: Optional[linear_mma.MmaPlan]  # strategy "mma"
    qdq: Optional[Callable]  # x2d -> QDQ(x2d) before the kernel (None: in-kernel, or none)
    raw_x: bool
    decode: dict = field(default_factory=dict)  # linear_decode.run_remembered's, once filled
    gemv: Optional[linear_gemv.GemvPlan] = None  # strategy "gemv"
    wgmma: Optional[linear_wgmma.WgmmaPlan] = None  # strategy "wgmma"


def _plan(x: Tensor, prepared: PreparedWeight, cached: dict, m: int, out_dtype: torch.dtype,
          bias: Tensor | None, strategy: str | None, config: object) -> _Plan:
    n, k = prepared.out_features, prepared.in_features
    consts = cached["consts"]
    asked = strategy is not None  # the caller's strategy: refused with a reason, never swapped
    table = config is None  # the config is a table row's (not the caller's)
    if strategy is None:
        strategy, auto = strategy_for(m, x.dtype, out_dtype, bias, not _INTERPRETED, consts,
                                      n=n, k=k)
        config = config or auto
    if strategy not in STRATEGIES or (strategy == "decode" and m > DECODE_LIMIT_M):
        raise ValueError(f"{_NAME}: strategy {strategy!r} cannot run M={m}; one of {STRATEGIES} "
                         f"(decode needs M <= {DECODE_LIMIT_M})")
    if strategy == "dequant-gemm" and not (x.dtype == out_dtype == torch.bfloat16 and (
            bias is None or bias.dtype == torch.bfloat16)):
        raise ValueError(f"{_NAME}: the dequant-gemm strategy takes bf16 x, output and bias "
                         f"only (got x {x.dtype}, out {out_dtype}); use 'tiled'")
    if strategy == "gemv" and m != 1:
        raise ValueError(f"{_NAME}: strategy 'gemv' runs one activation row, not M={m}")
    family = linear_configs.weight_family(consts)
    if strategy == "wgmma":
        cfg = config or linear_configs.config_for("wgmma", family, m, _INTERPRETED, n=n, k=k,
                                                  passed_over=wgmma_gates.passed_over)
        if table:
            cfg = wgmma_gates.table_config(cfg)
        rows = linear_configs.m_bucket(m)
        why = ("Gluon kernels do not run under TRITON_INTERPRET" if _INTERPRETED else
               linear_wgmma.unavailable(x.device, consts, k, x.dtype, out_dtype, cfg, rows))
        wgmma = None if why else linear_wgmma.wgmma_plan(
            cached, n, k, rows, bias is not None, cfg, act_facts(prepared.contract.activation))
        if wgmma is not None:  # the activation QDQ in the kernel (fuse_act) or launched first
            return _Plan(strategy, cfg, None, None if wgmma.act else
                         _act_qdq(prepared, consts, x, k, m), True, wgmma=wgmma)
        if asked:
            raise ValueError(f"{_NAME}: strategy 'wgmma' cannot run this call: "
                             f"{why or 'a finite weight scale byte is past 128'}; leave the "
                             "strategy to the table (another one runs it)")
        strategy, config = strategy_for(m, x.dtype, out_dtype, bias, not _INTERPRETED, consts,
                                        skip=("wgmma",), n=n, k=k)
    if strategy not in ("mma", "gemv"):
        return _Plan(strategy, config, None, None, False)
    if strategy == "gemv":  # the one row is QDQ'd inside the kernel
        gemv = linear_gemv.gemv_plan(
            cached, consts, n, k, KIND_OF_DTYPE[x.dtype], KIND_OF_DTYPE[out_dtype],
            bias is not None, not _INTERPRETED,
            config or linear_configs.config_for("gemv", family, m, _INTERPRETED, n=n, k=k))
        if gemv is not None:
            return _Plan(strategy, config, None, None, False, gemv=gemv)
        strategy, config = "mma", None  # not the word layout (e.g. a scale byte past 128)
    qdq = _act_qdq(prepared, consts, x, k, m)
    act_mode = ACT_NONE if qdq is not None else consts["ACT_MODE"]
    dot_kind, precision = dot_choice(x.dtype, act_mode)
    raw_x = (not _INTERPRETED and act_mode == ACT_NONE and x.dtype == torch.bfloat16
             and dot_kind == DOT_BF16)
    cfg = config or linear_configs.config_for("mma", family, m, _INTERPRETED, n=n, k=k)
    mma = linear_mma.mma_plan(
        cached, dict(consts, ACT_MODE=act_mode), n, k, linear_configs.m_bucket(m), dot_kind,
        precision, not _INTERPRETED, KIND_OF_DTYPE[x.dtype], KIND_OF_DTYPE[out_dtype],
        bias is not None, cfg, asm=not _INTERPRETED, raw_x=raw_x)
    return _Plan(strategy, cfg, mma, qdq, raw_x)


def _act_qdq(prepared: PreparedWeight, consts: dict, x: Tensor, k: int,
             m: int) -> Optional[Callable]:
    """The activation QDQ a kernel runs first, or None (weight-only, or QDQ'd in-kernel: the
    interpreter at M = 1). The rows are QDQ'd once (the dispatcher's Triton QDQ, bit-exact with
    the in-kernel one) rather than once per weight tile: H200 M = 1: 26 us against 53 us."""
    if consts["ACT_MODE"] == ACT_NONE or (m == 1 and _INTERPRETED):
        return None
    key = prepared.contract.activation
    if key in MX_DYNAMIC_KEYS:  # its kernel, planned: no per-call checks
        return qdq_plan.QdqPlan(key.format, key.scale.rounding, x.dtype, k, keep_launches=True)
    return _fp8_static_qdq(prepared, x.dtype)


def _fp8_static_qdq(prepared: PreparedWeight, dtype: torch.dtype) -> Callable:
    """The static fp8 QDQ of a layer's rows (ACT_FP8_STATIC: the one other key the kernels
    take) with the scale prepare_tensors put on the weight's device, built once a dtype."""
    cached = prepared.cache[_CACHE_KEY]
    plans = cached.setdefault("fp8_qdq", {})
    plan = plans.get(dtype)
    if plan is None:
        plan = plans[dtype] = qdq_plan.Fp8StaticQdq(
            cached["act_scale"], cached["consts"], dtype, cached["k"],
            keep_launches=qdq_plan.FP8_STATIC_BOUND_VERIFIED)
    return plan


def _qdq_rows(prepared: PreparedWeight, x2d: Tensor) -> Tensor:
    """x2d after the contract's activation QDQ, launched on its own before a kernel that takes
    x as it is (the dispatcher's Triton QDQ; a static fp8 key: the layer's `_fp8_static_qdq`,
    its scale on the device); weight-only: x2d."""
    key = prepared.contract.activation
    if key in MX_DYNAMIC_KEYS:
        return activation_qdq(key, backend="triton-qdq")(x2d, None)
    return x2d if key is None else _fp8_static_qdq(prepared, x2d.dtype)(x2d)


def _check_call(x: Tensor, prepared: PreparedWeight, out_dtype: torch.dtype,
                bias: Tensor | None, n: int) -> None:
    """A call's checks (run when its plan is made, and for an empty x): one-line errors."""
    check_input(x, prepared, _NAME)
    if out_dtype not in KIND_OF_DTYPE:
        raise ValueError(f"{_NAME}: out_dtype {out_dtype} is not float32, bfloat16 or float16")
    if not _INTERPRETED and not x.is_cuda:
        raise ValueError(f"{_NAME}: input is on {x.device}; the Triton kernel needs a CUDA / ROCm "
                         "tensor (or TRITON_INTERPRET=1 set before importing kernels.triton)")
    check_bias(bias, n, x.device, _NAME)


def _plan_key(m: int, x: Tensor, out_dtype: torch.dtype, bias: Tensor | None) -> tuple:
    """The key of the plan cache (`cached["plans"]`): calls of one key share a plan."""
    return (linear_configs.m_bucket(m), x.dtype, out_dtype, x.device,
            None if bias is None else (bias.dtype, bias.device, bias.shape))


def fused_linear(x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None, *,
                 out_dtype: torch.dtype | None = None, strategy: str | None = None,
                 config: object = None) -> Tensor:
    """x [..., K] -> [..., N] in `out_dtype` (default x's dtype): the contract's activation QDQ,
    weight dequant and matmul (fp32 accumulation, + bias). out_dtype fp32 exposes the
    accumulator before the final cast (used by the tests); `strategy` / `config` override the
    measured choice (tests and tools/tune_linear.py).

    The host work of a call is kept small (eager decoding is bound by it): the checks and the
    launch plan run once per (M bucket, dtypes, device) and are cached on the prepared weight."""
    cached = prepared.cache.get(_CACHE_KEY)
    default = bias is None and out_dtype is None and strategy is None and config is None
    if default and cached is not None and isinstance(x, Tensor):  # an input shape seen before:
        hot = cached.get("hot")  # its launches alone (eager_path)
        call = hot.get((x.shape, x.dtype, x.device)) if hot else None
        out = call(x) if call is not None else None
        if out is not None:
            return out
    if cached is None:  # prepared by another kernel's prepare(): derive once, keep
        cached = prepared.cache.setdefault(_CACHE_KEY, prepare_tensors(prepared))
    k = cached["k"]
    if not isinstance(x, Tensor) or x.dim() == 0 or x.shape[-1] != k:
        check_input(x, prepared, _NAME)
    out_dtype = x.dtype if out_dtype is None else out_dtype
    lead = x.shape[:-1]
    x2d = x.reshape(-1, k)
    if k > 1 and x2d.stride(1) != 1:
        x2d = x2d.contiguous()
    m = x2d.shape[0]
    n = cached["n"]
    if bias is not None and not isinstance(bias, Tensor):
        check_bias(bias, n, x.device, _NAME)
    if m == 0:  # nothing to run: the checks alone
        _check_call(x, prepared, out_dtype, bias, n)
        return torch.empty((*lead, n), dtype=out_dtype, device=x.device)
    pkey = _plan_key(m, x, out_dtype, bias)
    plans = cached["plans"]
    plan = plans.get(pkey) if strategy is None and config is None else None
    if plan is None:
        _check_call(x, prepared, out_dtype, bias, n)
        plan = _plan(x, prepared, cached, m, out_dtype, bias, strategy, config)
        if strategy is None and config is None:
            plans[pkey] = plan
    if plan.strategy == "dequant-gemm":
        return _dequant_gemm(x2d, prepared, bias).view(*lead, n)
    out = torch.empty((m, n), dtype=out_dtype, device=x.device)
    bias32 = bias if bias is None or bias.dtype == torch.float32 else bias.float()
    if plan.wgmma is not None:  # the stream looked up once for both launches
        stream = launcher.current_stream(plan.wgmma.device)
        if plan.qdq is not None:
            x2d = plan.qdq.into_scratch(x2d, stream) if isinstance(plan.qdq, qdq_plan.QdqPlan) \
                else plan.qdq(x2d)
        linear_wgmma.run_wgmma(plan.wgmma, x2d, out, bias32, stream)
        if default:
            eager_path.remember(cached.setdefault("hot", {}), plan.wgmma, plan.qdq, x)
        return out.view(*lead, n)
    if plan.gemv is not None:
        linear_gemv.run_gemv(plan.gemv, mx_quant.bits_view(x2d), mx_quant.bits_view(out), bias32)
        return out.view(*lead, n)
    if plan.strategy == "mma":
        if plan.qdq is not None:
            x2d = plan.qdq(x2d)
        linear_mma.run_mma(plan.mma, x2d if plan.raw_x else mx_quant.bits_view(x2d),
                           out if plan.mma.raw_out else mx_quant.bits_view(out), bias32)
        return out.view(*lead, n)
    if plan.decode:
        linear_decode.run_remembered(x2d, mx_quant.bits_view(out), bias32, plan.decode)
        return out.view(*lead, n)
    consts = dict(cached["consts"])
    dot_kind, precision = dot_choice(x.dtype, consts["ACT_MODE"])
    launch = dict(dot_kind=dot_kind, precision=precision, hw_cast=not _INTERPRETED,
                  in_kind=KIND_OF_DTYPE[x.dtype], out_kind=KIND_OF_DTYPE[out_dtype])
    if plan.strategy == "decode":
        cfg = plan.config or linear_decode.default_config(
            m, prepared.weight.elem_format.bits, _INTERPRETED)
        if m > 1 and consts["ACT_MODE"] != ACT_NONE:
            # QDQ the few rows once (the dispatcher's Triton QDQ, bit-exact with the in-kernel
            # one) instead of once per weight stripe: every program would redo all M x K
            x2d = _qdq_rows(prepared, x2d)
            consts["ACT_MODE"] = ACT_NONE
        linear_decode.launch_decode(x2d, out, cached, bias32, consts, config=cfg,
                                    remember=plan.decode if m == 1 and strategy is None
                                    and config is None else None, **launch)
    else:
        _launch_tiled(x2d, out, cached, bias32, consts, plan.config, **launch)
    return out.view(*lead, n)


def _launch_tiled(x2d: Tensor, out: Tensor, cached: dict, bias: Tensor | None, consts: dict,
                  tile: tuple | None, dot_kind: int, precision: str, hw_cast: bool,
                  in_kind: int, out_kind: int) -> None:
    m, k = x2d.shape
    n = out.shape[1]
    bm, bn, bk, warps, stages = tile or (INTERPRETER_TILE if _INTERPRETED else GPU_TILE)
    scale = cached["act_scale"]
    data, scales = cached["data"], cached["scales"]

    def run(cfg: fit.TileConfig) -> None:
        grid = (triton.cdiv(m, cfg.bm), triton.cdiv(n, cfg.bn))
        head = (mx_quant.bits_view(x2d), data, scales, scale if scale is not None else scales,
                bias if bias is not None else scales, mx_quant.bits_view(out), m, n, k,
                x2d.stride(0), data.stride(0), scales.stride(0), out.stride(0))
        named = dict(IN_KIND=in_kind, OUT_KIND=out_kind, HAS_BIAS=bias is not None,
                     DOT_KIND=dot_kind, DOT_PRECISION=precision, HW_CAST=hw_cast,
                     BLOCK_M=cfg.bm, BLOCK_N=cfg.bn, BLOCK_K=cfg.bk, **consts)
        args = head + tuple(named[p] for p in _emulated_linear_kernel.arg_names[len(head):])
        launcher.launch_auto(_emulated_linear_kernel, grid, args, num_warps=cfg.warps,
                             num_stages=cfg.stages)

    key = (x2d.device.index, in_kind, out_kind, dot_kind, precision, bias is not None,
           tuple(sorted(consts.items())))
    fit.launch_fitting(_NAME + " tiled", key, fit.TileConfig(bm, bn, bk, warps, stages), run,
                       lambda cfg: fit.smaller_configs(
                           cfg, stages="stages", blocks=(("bk", 64), ("bn", 16), ("bm", 16))))


def _dequant_gemm(x2d: Tensor, prepared: PreparedWeight, bias: Tensor | None) -> Tensor:
    """bf16 only: Triton QDQ of x and dequantization of W (exact in bf16), cuBLAS GEMM."""
    xq = _qdq_rows(prepared, x2d)
    w = mx_dequantize(prepared.weight, torch.bfloat16, backend="triton-qdq")
    return F.linear(xq, w, bias)


class TritonEmulationLinear(LinearKernel):
    """Every MX weight x every dispatcher activation key (and weight-only) in one fused
    Triton kernel; equals ReferenceEmulationLinear up to fp32 summation order."""

    name = "triton-emulation"

    def finish_prepare(self, prepared: PreparedWeight) -> None:
        prepared.cache[_CACHE_KEY] = prepare_tensors(prepared)

    def apply(self, x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None) -> Tensor:
        return fused_linear(x, prepared, bias)

    def route(self, x: Tensor, prepared: PreparedWeight) -> Optional[str]:
        """The plan a call of x (no bias, x's dtype out) made, cached on the weight: strategy,
        config and where a W*A* layer's activation QDQ runs; None before such a call."""
        cached = prepared.cache.get(_CACHE_KEY)
        m = x.numel() // max(x.shape[-1], 1) if x.dim() else 0
        plan = None if cached is None else cached["plans"].get(_plan_key(m, x, x.dtype, None))
        if plan is None:
            return None
        qdq = ("QDQ in the kernel" if plan.wgmma is not None and plan.wgmma.act else
               "QDQ launched first" if plan.qdq is not None else "")
        return route_words(plan.strategy, plan.config, qdq)


__all__ = ["TritonEmulationLinear", "fused_linear"]
