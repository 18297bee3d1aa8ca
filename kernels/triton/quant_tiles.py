"""The quantize / dequantize / QDQ kernels' tiles (mx_quant's launches): the interpreter's, the
GPU's as measured, and a sweep's override of them (tools/bench_quant.py --tiles,
tools/sass_quant.py --tile)."""
from __future__ import annotations

# Interpreter: one tile shape (BLOCK_K 64 so the tests cover K < BLOCK_K and K % BLOCK_K != 0).
INTERPRETER_TILE = {"BLOCK_R": 16, "BLOCK_K": 64}
# GPU: one tile for every format (H200 2026-11-29, docs/benchmarks.md: an autotuner over six
# tiles came within a few percent of it at six compilations a key and tens of us of host time a
# call). BLOCK_K a multiple of 64 keeps fp4 bytes and fp6 words whole; tails are masked.
GPU_TILE = {"BLOCK_R": 16, "BLOCK_K": 256}
# Packed mxfp6 (quantize and dequantize): H100 2026-12-05, bf16 8192^2 (benchmarks part 29),
# graph us against the tiles before (quantize 32 x 256, dequantize 16 x 256): 66.9 / 73.2, 71.1 /
# 73.8, bits equal; the other layouts' tiles were within 1 % of theirs.
PACKED_FP6_TILE = {"BLOCK_R": 8, "BLOCK_K": 512}
GPU_WARPS = 4
# A sweep's hook (tools/bench_quant.py --tiles): {(kernel, pack): (BLOCK_R, BLOCK_K, num_warps)}
# in place of the shipped tile; empty in use.
TILE_OVERRIDE: dict[tuple[str, int], tuple[int, int, int]] = {}


def tile_override(text: str) -> tuple[int, int, int]:
    """'16x512w8' -> (16, 512, 8), a TILE_OVERRIDE value (the sweep tools' form); ValueError
    naming the text and the rule where the kernels could not run it (power-of-two rows, K and
    warps for tl.arange; K a multiple of 64: whole fp4 bytes and fp6 chunks)."""
    try:
        rows_k, warps = text.strip().lower().split("w")
        rows, cols = (int(v) for v in rows_k.split("x"))
        tile = (rows, cols, int(warps))
    except ValueError:
        raise ValueError(f"{text!r}: expected ROWSxKwWARPS, e.g. 16x256w4") from None
    if any(v <= 0 or v & (v - 1) for v in tile) or cols % 64:
        raise ValueError(f"{text!r}: rows, K and warps must be powers of two, K a multiple of "
                         "64 (whole fp4 bytes and fp6 chunks)")
    return tile


def gpu_tile(kernel: str, pack: int) -> dict[str, int]:
    """The GPU tile of `kernel` ('quantize', 'dequantize' or 'qdq') for layout code `pack`."""
    if kernel not in ("quantize", "dequantize", "qdq"):
        raise ValueError(f"kernels.triton.quant_tiles.gpu_tile: unknown kernel {kernel!r}")
    if (kernel, pack) in TILE_OVERRIDE:
        rows, cols, _ = TILE_OVERRIDE[kernel, pack]
        return {"BLOCK_R": rows, "BLOCK_K": cols}
    if kernel != "qdq" and pack == 2:
        return dict(PACKED_FP6_TILE)
    return dict(GPU_TILE)


def gpu_warps(kernel: str, pack: int) -> int:
    """Warps a GPU program of `kernel` for layout code `pack` runs (its tile: `gpu_tile`)."""
    return TILE_OVERRIDE[kernel, pack][2] if (kernel, pack) in TILE_OVERRIDE else GPU_WARPS


__all__ = ["GPU_TILE", "GPU_WARPS", "INTERPRETER_TILE", "PACKED_FP6_TILE", "TILE_OVERRIDE",
           "gpu_tile", "gpu_warps", "tile_override"]
