"""MoE experts on sm_90 through the Gluon wgmma kernel (linear_wgmma's kernel, GROUPED).

Packed mxfp4 experts, mxfp6 ones (fp6_words' layout) once `wgmma_gates.FP6_VERIFIED`, and
8-bit ones (mxfp8 e4m3 / mxint8: fp8_words' / int8_words' layouts) once `EIGHT_BIT_VERIFIED`;
one warpgroup a program (64 weight rows), or two (`WgmmaConfig.warps = 8`, or the wide ws
tile's two consumers at block_m 256: 128 rows; an expert's N is padded to whole 128 rows).

Why: the grouped Triton kernel (moe_grouped.py) decodes every weight element with the generic
exact decode and stages it through shared memory, while the experts hold most of an MoE model's
bytes; the dense wgmma kernel reads packed mxfp4 at 2-2.6x bf16 at small M (docs/benchmarks.md).
Here each (expert, M tile) of the routing's tile table is one of that kernel's tiles (or of
its warp-specialized twin, linear_wgmma_ws, for a config with `ws`: the weight by TMA
descriptors of every expert's layout, built once per layout).

Host (no device sync: CUDA-graph capturable): the rows are sorted by expert as in moe_grouped
(moe_routing.sort_rows, one launch: the same stable order and packed tile table), then gathered;
W4A4 QDQs the T token rows once before the gather (row-wise: the same bits). Kernel grid (N
tiles, table slots, K slices); a slot past the last tile returns at once. The output is fp32
[T * top_k, N]: each row times its routing weight, written by one program; the slots are then
added in order and cast once (moe_routing.combine), as the Triton path does, so both differ
from kernels.reference.moe only by the dot's summation order.

VERIFIED: whether `grouped_experts_triton` takes this path by itself: set once the GPU tests
(tests/kernels/triton/test_moe_wgmma.py) passed in a whole-suite run on an H200 (commit
017ee6a, 2026-12-01, docs/verification.md); Gluon does not run under the CPU interpreter.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from kernels.mx import MXTensor
from kernels.reference.packing import unpack_codes
from kernels.select.activation_keys import MX_DYNAMIC_KEYS
from kernels.spec.contract import QuantKey
from kernels.spec.formats import get_format
from kernels.triton import launcher, linear_configs, linear_wgmma, qdq_plan, wgmma_gates
from kernels.triton.fit import k_slices
from kernels.triton.fp4_words import ALIGN
from kernels.triton.linear_decode import checked_once
from kernels.triton.linear_mma import _LOCK_TILES, workspace
from kernels.triton.linear_wgmma import (BLOCK_M_VERIFIED, FORMATS, WgmmaConfig,
                                         _wgmma_linear_kernel, copyable_rows)
from kernels.triton.linear_wgmma_ws import _ws_linear_kernel, ws_descriptors
from kernels.triton.wgmma_config import layout_fits, layout_of, weight_programs
from kernels.triton.wgmma_tiles import x_descriptor
from kernels.triton.moe_routing import combine, sort_rows

VERIFIED = True
# the kernel's formats the experts' layout (expert_layout) is written for
EXPERT_FORMATS = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8")
# 8-bit experts (mxfp8 e4m3 / mxint8: the dense kernel's FMT 3 / 4, GROUPED; their layouts and
# fits checks as dense), written 2026-12-05 without a GPU (the grouped FMT 3 / 4 kernels compile
# for sm_90a in CPU CI; their GPU test, test_moe_wgmma's 8-bit test, forces this on): on once
# it passes in a whole-suite run.
EIGHT_BIT_VERIFIED = True


def unavailable(x: Tensor, weight: MXTensor, activation: QuantKey | None) -> Optional[str]:
    """Why the wgmma path cannot run this call (None: it can)."""
    if weight.fmt not in EXPERT_FORMATS or (weight.fmt == "mxfp4" and weight.layout != "packed"):
        return "packed mxfp4, mxfp6, mxfp8 e4m3 or mxint8 expert weights only"
    if not {"mxfp4": True, "mxfp8_e4m3": EIGHT_BIT_VERIFIED and wgmma_gates.FP8_VERIFIED,
            "mxint8": EIGHT_BIT_VERIFIED and wgmma_gates.INT8_VERIFIED}.get(
                weight.fmt, wgmma_gates.FP6_VERIFIED):
        return f"{weight.fmt} experts: written, not yet verified on a GPU"
    if x.dtype != torch.bfloat16:
        return "bf16 tokens only"
    if activation is not None and activation not in MX_DYNAMIC_KEYS:
        return f"activation key {activation}: the grouped Triton kernel runs it"
    if weight.shape[-1] % 32:
        return f"K={weight.shape[-1]} is not whole 32-element blocks"
    if not x.is_cuda or torch.version.hip is not None:
        return "needs an NVIDIA GPU"
    if torch.cuda.get_device_capability(x.device) != (9, 0):
        return "wgmma is sm_90 only"
    return None


def config_for(rows: int, num_experts: int, fmt: str, n: int, k: int) -> WgmmaConfig:
    """The table's wgmma row of the weight's family (linear_configs.wgmma_family) for the mean
    rows per expert (one M tile covers it) and an expert's N x K: its experts-only rows first,
    then the dense rows. Past 128 rows an expert, an experts-only row for that many (the wide
    tile: 256 rows, one weight decode for ~192 rows where 128-row tiles decode it twice) where
    the table has one, else the 128-row row."""
    family = linear_configs.wgmma_family(fmt)
    mean = -(-rows // num_experts)
    if mean > BLOCK_M_VERIFIED[-1]:
        wide = linear_configs.experts_row("wgmma", family, mean, n=n, k=k)
        if wide is not None:
            return wide
    block_m = next((b for b in BLOCK_M_VERIFIED if b >= mean), BLOCK_M_VERIFIED[-1])
    return linear_configs.config_for("wgmma", family, block_m, False, n=n, k=k, experts=True)


def expert_layout(weight: MXTensor) -> tuple[Tensor, Tensor, Tensor, int, int]:
    """Every expert's weight in the one wgmma layout (fp4_words.ALIGN: every config reads it),
    in one buffer: (words, scale bytes, mxfp6 B words (else the words again), words an expert,
    scale bytes an expert). An expert's N is padded to whole ALIGN[0] rows (zero codes); its
    B words are half its words."""
    e, n, k = weight.shape
    pad = -n % ALIGN[0]
    scales = torch.nn.functional.pad(weight.scales, (0, 0, 0, pad)).reshape(e * (n + pad), -1)
    if weight.fmt == "mxfp4":
        rows = torch.nn.functional.pad(weight.data, (0, 0, 0, pad))
    else:  # one code a byte
        rows = torch.nn.functional.pad(unpack_codes(
            weight.data.reshape(e * n, -1), get_format(weight.fmt), weight.layout, k
        ).reshape(e, n, k), (0, 0, 0, pad))
    words, sbytes, bwords = layout_of(weight.fmt, rows.reshape(e * (n + pad), -1), scales)
    bwords = words if bwords is None else bwords
    return words, sbytes, bwords, words.numel() // e, sbytes.numel() // e


def layout_holds(cached: dict, weight: MXTensor) -> bool:
    """Whether the experts' layout holds the weight exactly (wgmma_config.layout_fits, as the
    dense layouts: checked once per weight, kept in the caller's `cached`: a device sync); else
    the grouped Triton kernel runs the experts."""
    return checked_once(cached, "wgmma_scale_fits",
                        lambda: layout_fits(weight.fmt, weight.data, weight.scales))


def grouped_experts_wgmma(x: Tensor, weight: MXTensor, activation: QuantKey | None,
                          topk_ids: Tensor, topk_weights: Tensor, out_dtype: torch.dtype,
                          cached: dict, cfg: WgmmaConfig | None = None) -> Tensor:
    """x [T, K] bf16, weight [E, N, K] of EXPERT_FORMATS, routing [T, top_k] (checked by the
    caller; `unavailable` said yes) -> [T, N] in out_dtype. `cached`: the caller's per-weight
    dict (the layout and the scale check are kept there: built once, the check syncs once)."""
    tokens, k = x.shape
    num_experts, n, _ = weight.shape
    top_k = topk_ids.shape[1]
    rows = tokens * top_k
    cfg = cfg or wgmma_gates.table_config(config_for(rows, num_experts, weight.fmt, n, k))
    why = wgmma_gates.gated(cfg)
    if why:
        raise ValueError(f"moe_wgmma: {why}; use a config without that part (warps 4, sub_k 1, "
                         "rep 1, tma_x False, ws False), or none: the table's")
    if cfg.overlap or cfg.group_m != 1 or cfg.persistent:
        raise ValueError(f"moe_wgmma: overlap={cfg.overlap} / group_m={cfg.group_m} / "
                         f"persistent={cfg.persistent} are dense launches' (the experts' grid is "
                         "a tile table): use overlap=False, group_m=1, persistent=False")
    if not layout_holds(cached, weight):
        raise ValueError(f"moe_wgmma: the {weight.fmt} experts' layout cannot hold this weight "
                         "(a finite scale byte past its range, or a code it has no place for: "
                         "`layout_holds`); grouped_experts_triton runs such weights")
    layout = cached.get("wgmma_moe")
    if layout is None:
        layout = cached.setdefault("wgmma_moe", expert_layout(weight))
    words, sbytes, bwords, stride_we, stride_se = layout
    if activation is not None:  # row-wise QDQ: the same bits before or after the gather (once
        # for the T token rows: a config's fuse_act is for dense layers)
        qkey = ("wgmma_moe_qdq", activation, x.dtype, k)
        plan = cached.get(qkey)  # (built once a weight: its checks and constants)
        if plan is None:
            plan = cached.setdefault(qkey, qdq_plan.QdqPlan(
                activation.format, activation.scale.rounding, x.dtype, k))
        x = plan(x)
    src, rw_sorted, dest, slots, grp = sort_rows(topk_ids, topk_weights, num_experts,
                                                 cfg.block_m)
    x_sorted = x.index_select(0, src)
    grid_n = weight_programs(cfg, n, "moe_wgmma")  # (each expert's rows: n padded alike)
    ktiles = -(-k // cfg.block_k)
    split, per_split = k_slices(ktiles, cfg.split)
    if split > 1 and grid_n * slots * cfg.parts > _LOCK_TILES:
        split, per_split = 1, ktiles
    x_sorted = copyable_rows(x_sorted)
    weighted = torch.empty((rows, n), dtype=torch.float32, device=x.device)
    part, lock = workspace(split * grid_n * slots * 16 * cfg.groups * cfg.block_m
                           if split > 1 else 1, x.device)
    key = (launcher.intern(("wgmma-moe", x.device.index, split, cfg, n, k, weight.fmt)),
           launcher.aligned(x_sorted), x_sorted.stride(0) % 16 == 0)
    operands = (words, bwords, sbytes)
    if cfg.ws:  # the weight by TMA: descriptors of every expert's layout
        operands = ws_descriptors(cached, ("wgmma_moe_ws", cfg.block_k), words, bwords, sbytes,
                                  cfg.block_k)
    launcher.launch(_ws_linear_kernel if cfg.ws else _wgmma_linear_kernel, key,
                    (grid_n, slots, split),
                    (x_descriptor(x_sorted, cfg.block_m, cfg.block_k) if cfg.tma_x else x_sorted,
                     *operands, lock, weighted, part, lock, grp, dest, rw_sorted,
                     rows, n, k, per_split, num_experts, x_sorted.stride(0), weighted.stride(0),
                     stride_we, stride_se, False, split, cfg.block_m, cfg.block_k, cfg.stages,
                     cfg.warps, k % cfg.block_k != 0, True, FORMATS.index(weight.fmt), (),
                     cfg.sub_k, cfg.rep, cfg.tma_x, False, 0, False, 1, False, 0),
                    num_warps=cfg.warps, num_stages=1, maxnreg=cfg.maxnreg)
    return combine(weighted.view(tokens, top_k, n), out_dtype)


__all__ = ["EIGHT_BIT_VERIFIED", "EXPERT_FORMATS", "VERIFIED", "config_for", "expert_layout",
           "grouped_experts_wgmma", "layout_holds", "unavailable"]
