"""One timing rule for every benchmark script: median milliseconds of a call."""
from __future__ import annotations

import time
from typing import Callable


def median_ms(fn: Callable[[], object], device: str, warmup_ms: int = 100,
              rep_ms: int = 300) -> float:
    """CUDA: triton.testing.do_bench's median (events, warm-up, L2 flushed between calls).
    CPU (the interpreter, for checking the scripts' logic): the median of three calls."""
    if device == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms,
                                             return_mode="median"))
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[1] * 1e3
