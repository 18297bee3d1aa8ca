"""Programmatic dependent launch (PDL, sm_90) from a W*A* layer's activation QDQ to its GEMM.

Why: on Hopper a W4A4 layer is two launches, the activation QDQ (qdq_plan.QdqPlan) and then
the wgmma GEMM reading its rows. At M = 1 / 16 on 8192 x 8192 the pair ran 2.4-3.0 us (14-18 %)
past W4A16's one launch (H200, docs/benchmarks.md part 16; issue 14 asks for 10 %), about a
kernel launch's latency: the GEMM's programs are only placed once the QDQ has finished. With
PDL the QDQ lets its dependent launch as soon as each of its programs has started
(`griddepcontrol.launch_dependents`), and the GEMM, launched with the programmatic attribute
(Triton's `launch_pdl`), places its programs at once, issues its first ring of weight copies
and then waits (`griddepcontrol.wait`) until the QDQ grid has finished and its writes are
visible, before its first x copy: the GEMM's launch, set-up and first weight tiles overlap the
QDQ. Both instructions do nothing where the launch is not programmatic (PTX ISA), so the QDQ
kernel releases whatever follows it.

Safety: only the GEMM is launched programmatically, and only right after its own QDQ; the QDQ
waits, as any launch, for the stream's previous kernel (the layer before, which may still read
the stream's scratch rows the QDQ writes: qdq_plan.scratch). So when the GEMM starts, the QDQ is
the one kernel that may still run: it writes x's QDQ'd rows (read by the GEMM after its wait
only) and reads the layer's input, which the GEMM never writes; the weights (read before the
wait) no kernel writes. The one-partition kernel waits before any global access but those
weight copies; the ws kernel's loader waits, its consumers only store results. The wait is
wgmma_tiles.grid_wait (Gluon); the release below is Triton's, for the QDQ kernel.

PDL_VERIFIED gates it as linear_wgmma's gates do: written 2026-12-05 without a GPU (compiled
for sm_90a offline: tests/kernels/triton/test_grid_dependency.py); switched on once that file's
GPU tests pass in a whole-suite H200 run, and kept only where `registry bench` shows W4A4's
time nearer W4A16's. Its GPU tests pass (same bits as off). Parts 21 / 23 / 24's "PDL on"
columns ran with PDL off (tools/bench_pdl.py set the gate around `prepare` only, while plans read
it at a layer's first call: part 31). Measured properly (H100, 2026-12-05, part 32, two runs):
1-3 us gained on N = 28672, 1.5 us lost at M = 16 / 64 on 8192^2 (the GEMM's programs wait on a
QDQ still running). Kept OFF.
"""
from __future__ import annotations

import triton
import triton.language as tl

PDL_VERIFIED = False


def pdl_here(interpreted: bool) -> bool:
    """Whether launches made now take part in PDL (the gate, and a compiled kernel)."""
    return PDL_VERIFIED and not interpreted


@triton.jit
def release_dependents():
    """Let the next kernel on the stream, if launched programmatically, place its programs
    (once every program of this one has called this or finished)."""
    tl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [],
                              dtype=tl.int32, is_pure=False, pack=1)


__all__ = ["PDL_VERIFIED", "pdl_here", "release_dependents"]
