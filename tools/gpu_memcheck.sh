#!/usr/bin/env bash
# compute-sanitizer memcheck over pytest node ids on the GPU machine, each in a process of its
# own (in parallel), with the PyTorch caching allocator off (an out-of-bounds read inside one of
# its segments is otherwise invisible to the checker) and every Triton launch logged and
# synchronized (tools/launch_trace.py): $OUT/memcheck_N.txt (the checker's report),
# then the launches (each tensor argument's address range) and pytest's tail, one file a node.
# A faulting kernel is terminated and the test goes on (--destroy-on-device-error kernel), so
# one run lists every launch that reads or writes out of bounds.
#
#   OUT=/tmp/out bash tools/gpu_memcheck.sh 'tests/x.py::test_a[p]' 'tests/y.py::test_b'
# (no nodes: one test of each wgmma kernel family on N / K tails; at most 8 nodes a call: the
# device tool brings back 8 files)
# (2026-12-03: found the out-of-bounds weight reads behind two illegal-address failures of a
# whole-suite run, which memory layout had hidden in earlier runs.)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-memcheck}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:$PWD/tools${PYTHONPATH:+:$PYTHONPATH} PYTORCH_NO_CUDA_MEMORY_CACHING=1
source tools/device_wheels.sh
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ $# -eq 0 ]; then  # no nodes named: one test of each wgmma kernel family, on N / K tails
  T=tests/kernels/triton
  set -- "$T/test_wgmma_formats.py::test_k_halves_match_the_reference[72-2880-mxfp6_e3m2]" \
    "$T/test_wgmma_formats.py::test_x_by_tma_matches_the_reference[72-2880-mxfp8_e4m3]" \
    "$T/test_wgmma_formats.py::test_fused_activation_qdq_is_the_dispatchers[72-2880-mxfp4:even-True]" \
    "$T/test_linear_wgmma_ws_gpu.py::test_warp_specialized_matches_the_reference[mxfp6_e2m3-72-2880]" \
    "$T/test_linear_wgmma_ws_gpu.py::test_wide_m_matches_the_reference[72-2880-mxfp8_e4m3]" \
    "$T/test_moe_wgmma_gpu.py::test_x_by_tma_experts_match_the_reference[mxfp6_e3m2]" \
    "$T/test_moe_wgmma_gpu.py::test_wide_tile_experts_match_the_reference[mxfp4]" \
    "$T/test_linear_wgmma.py::test_bound_launches_give_the_general_paths_bits[mxfp4]"
fi
i=0
for node in "$@"; do
  i=$((i + 1))
  (LAUNCH_TRACE=$OUT/trace_$i.txt timeout "${MEMCHECK_S:-400}" "$CS" --tool memcheck \
     --destroy-on-device-error kernel --print-limit "${PRINT_LIMIT:-40}" \
     --log-file "$OUT/memcheck_$i.txt" python3 -m pytest -q -p no:cacheprovider -p launch_trace \
     "$node" > "$OUT/pytest_$i.txt" 2>&1
   echo "rc=$?" >> "$OUT/pytest_$i.txt") &
done
wait
# one file a node comes back (the device tool returns a few files only): the checker's report,
# then the launches, then pytest's tail
i=0
for node in "$@"; do
  i=$((i + 1))
  f=$OUT/memcheck_$i.txt
  { echo "---- launches (tools/launch_trace.py)"; cat "$OUT/trace_$i.txt" 2>/dev/null
    echo "---- pytest $node"; tail -60 "$OUT/pytest_$i.txt"; } >> "$f"
  echo "== $i $node: $(tail -2 "$OUT/pytest_$i.txt" | tr '\n' ' ')"
  grep -E "ERROR SUMMARY" "$f" | head -1
  echo "faulting launches: $(grep -c FAULT "$OUT/trace_$i.txt" 2>/dev/null)"
  rm -f "$OUT/trace_$i.txt" "$OUT/pytest_$i.txt"
done
