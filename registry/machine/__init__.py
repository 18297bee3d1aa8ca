"""This machine: `registry lint --probe` (probe: run every (scheme, kernel) pair that runs here,
and its record), `registry doctor`'s facts (doctor), the `registry bench` runner (bench) and the
one timing rule of every benchmark (timing). Gathered, never printed: registry/cli prints.

Nothing is imported here; torch is imported only where a probe or a benchmark runs.
"""
