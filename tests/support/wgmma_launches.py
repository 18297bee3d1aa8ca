"""Record the wgmma kernels' launches on the CPU (Gluon needs an sm_90 GPU): the first call's
arguments as `launcher.launch` gets them, later calls' as the plan's `launcher.Bound` passes
them; shared by the one-partition and warp-specialized kernels' launch tests (and the QDQ
plans', `recorded_launches`)."""
from __future__ import annotations

import torch

from kernels.mx import MXTensor
from kernels.triton import launcher as launcher_mod
from kernels.triton import linear_emulation as le
from kernels.triton import linear_wgmma as lw


def _stand_in(bound: list, as_record) -> type:
    """A compiled kernel's stand-in for `launcher.Bound`: each launch appends as_record(its
    arguments past the launcher's nine) to `bound`."""

    class Compiled:
        function, packed_metadata = 3, ("meta",)

        @staticmethod
        def run(*a):
            bound.append(as_record(a[9:]))

    return Compiled


def record_launches(monkeypatch, cfg) -> tuple[list, list]:
    """Patch the launch path so that every fused_linear / grouped_experts_wgmma call of a wgmma
    config records its launch: `general` gets (kernel, num_warps, grid, {name: argument}) of each
    `launcher.launch`, `bound` {name: argument} of each Bound call; the table picks `cfg`."""
    names = lw._wgmma_linear_kernel.arg_names
    general: list = []
    bound: list = []
    compiled = _stand_in(bound, lambda args: dict(zip(names, args)))

    def record(fn, key_, grid, args, num_warps, num_stages, **kw):
        general.append((fn, num_warps, grid, dict(zip(names, args))))
        return compiled

    monkeypatch.setattr(launcher_mod, "launch", record)
    monkeypatch.setattr(launcher_mod, "current_stream", lambda device: 5)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(lw, "unavailable", lambda *a, **k: None)
    monkeypatch.setattr(le, "_check_call", lambda *a, **k: None)
    monkeypatch.setattr(le, "_INTERPRETED", False)
    monkeypatch.setattr(le, "strategy_for", lambda *a, **k: ("wgmma", cfg))
    return general, bound


def recorded_launches(monkeypatch, streams: dict) -> tuple[list, list]:
    """Patch `launcher.launch` to record each general launch as (kernel, key, arguments) and
    return a stand-in compiled kernel, whose `launcher.Bound` calls record their argument
    tuples in `bound`; `launcher.current_stream` answers streams["now"] (None: no stream)."""
    general: list = []
    bound: list = []
    compiled = _stand_in(bound, tuple)

    def record(fn, key, grid, args, **kw):
        general.append((fn, key, args))
        return compiled

    monkeypatch.setattr(launcher_mod, "launch", record)
    monkeypatch.setattr(launcher_mod, "current_stream", lambda device: streams["now"])
    return general, bound


def two_experts(w: MXTensor, monkeypatch) -> MXTensor:
    """An [N, K] mxfp4 weight as two experts of N / 2 rows, with the MoE host steps that need a
    GPU (the sort kernel, the combine) swapped for torch ones."""
    from kernels.triton import moe_routing, moe_wgmma

    monkeypatch.setattr(moe_wgmma, "sort_rows", moe_routing.sort_rows_torch)
    monkeypatch.setattr(moe_wgmma, "combine", lambda rows, dtype: rows.sum(1))
    n, k = w.shape
    return MXTensor(w.data.reshape(2, n // 2, -1), w.scales.reshape(2, n // 2, -1), "mxfp4",
                    "even", torch.Size((2, n // 2, k)), w.layout)
