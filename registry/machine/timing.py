"""The one timing rule of every benchmark (`registry bench`, tools/*.py).

- eager (`median_ms`): events around each single call, L2 flushed before each
  (`triton.testing.do_bench`'s rule: launch cost included), median; on a CPU one warm-up, then
  the median of a few `time.perf_counter` calls (the interpreter, for checking logic only);
- graph (`graph_ms`): the call captured in a CUDA graph, replayed n times between two events
  (no launch cost: the kernel's own time), median of several repeats;
- loop (`loop_ms`): n calls back to back between two events, no flush, no sync (an eager decode
  loop): the host's time a call wherever it exceeds the GPU's, which `median_ms` hides up to
  the length of its flush (the flush kernel keeps the GPU busy while the host launches);
- `copy_bandwidth`: D2D copy of a large buffer, the memory-bound baseline;
- `_copies_needed`: how many weight copies a graph replay must cycle through to exceed twice
  the L2 cache, so that each call reads its weight from HBM as in a model.
Importing this module does not import torch.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable


def _is_cuda(device) -> bool:
    return str(device).startswith("cuda")


def _l2_bytes(device) -> int:
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    return int(getattr(props, "L2_cache_size", 0) or 64 << 20)


def median_ms(fn: Callable[[], object], device, warmup_ms: float = 100,
              rep_ms: float = 300, *, flush_l2: bool = True, cpu_calls: int = 3) -> float:
    """Median ms of one eager call. CUDA: events around each call, L2 flushed before each
    (outside the events), repetitions to fill `rep_ms` (do_bench's rule). CPU: one warm-up,
    then the median of `cpu_calls` perf_counter timings."""
    if not _is_cuda(device):
        fn()
        times = []
        for _ in range(max(1, cpu_calls)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3
    import torch

    flush = torch.empty(2 * _l2_bytes(device), dtype=torch.int8, device=device)

    def one() -> None:
        if flush_l2:
            flush.zero_()
        fn()

    estimate = _warmed(one, warmup_ms)
    n = min(max(5, int(rep_ms / estimate)), 1000)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for s, e in zip(starts, ends):
        if flush_l2:
            flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def _warmed(call: Callable[[], object], warmup_ms: float) -> float:
    """The warm-up both eager rules share: one call, five timed back to back for an estimate of
    one (ms), then calls for `warmup_ms`; returns the estimate."""
    import torch

    call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        call()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / estimate))):
        call()
    return estimate


def loop_ms(fn: Callable[[], object], device, warmup_ms: float = 10, rep_ms: float = 50,
            repeats: int = 5, *, cpu_calls: int = 3) -> float:
    """Median ms of one call among back-to-back calls (module docstring): n calls between two
    events, `repeats` times; `fn` cycles its own operands (weight copies, so that each call
    reads its weight from HBM). CPU: `median_ms`'s rule."""
    if not _is_cuda(device):
        return median_ms(fn, device, cpu_calls=cpu_calls)
    import torch

    estimate = _warmed(fn, warmup_ms)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = min(max(10, int(rep_ms / max(1, repeats) / estimate)), 2000)
    times = []
    for _ in range(max(1, repeats)):
        torch.cuda.synchronize()  # each run starts from an idle GPU: the host sets the pace
        start.record()
        for _ in range(n):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / n)
    return statistics.median(times)


def graph_ms(fn: Callable[[], object], device, rep_ms: float = 100,
             repeats: int = 7) -> float:
    """Median ms of one replay of `fn` captured in a CUDA graph (n replays between events,
    `repeats` times). Raises whatever capture raises; CUDA only."""
    import torch

    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm-up off the capture (compiles, autotunes, allocates)
        for _ in range(3):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 3, 1e-3)
    n = min(max(3, int(rep_ms / repeats / estimate)), 2000)
    times = []
    for _ in range(max(1, repeats)):
        start.record()
        for _ in range(n):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / n)
    return statistics.median(times)


def copy_bandwidth(device, nbytes: int = 1 << 30) -> float:
    """TB/s of dst.copy_(src) (bytes read + written) on an `nbytes` buffer."""
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes <= 0:
        raise ValueError(f"copy_bandwidth: nbytes={nbytes!r}; give a positive int (bytes)")
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), device, 25, 200, flush_l2=False)
    return 2 * nbytes / (ms * 1e-3) / 1e12


# --- the plan --------------------------------------------------------------------------------

def _copies_needed(weight_bytes: int, device) -> int:
    """Weights a graph replay cycles through so that together they exceed twice the L2 cache
    (each replay then reads its weight from HBM, as in a model); 1 on a CPU."""
    if weight_bytes <= 0:
        raise ValueError(f"_copies_needed: weight_bytes={weight_bytes!r}; an empty weight has "
                         "nothing to time")
    if not _is_cuda(device):
        return 1
    return min(8, max(1, math.ceil(2 * _l2_bytes(device) / weight_bytes)))


