#!/usr/bin/env bash
# Nsight Compute on the wgmma kernel as the table runs it, one report per case, in ONE device
# call: what bounds M = 128 on N = 8192 (0.90x bf16 whatever the occupancy, docs/benchmarks.md
# part 7) — warp stall reasons, issue slots, tensor-pipe and L2 / shared throughput.
#
#   OUT=/tmp/out bash tools/ncu_wgmma.sh
#   CASES="mxfp4:128:8192x8192 mxfp4:128:28672x8192" OUT=/tmp/out bash tools/ncu_wgmma.sh
#
# A case is weight format:M:NxK (bf16 activations, the table's config for that M and shape).
# Each report is `ncu --print-summary none` text of one launch (after two warm-up calls):
# $OUT/ncu_<format>_<M>_<NxK>.txt (STALLS=1: also stall reasons, stalls_*.txt, and the
# sampled stalls of each SASS instruction, sass_*.csv: ncu's source page as CSV). ncu replays
# the kernel per section group, so a case takes tens of seconds; the device tool brings back
# the first files it finds, keep CASES short.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ncu}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source tools/device_wheels.sh  # pydantic / jsonschema from .whl/ where missing
NCU=${NCU:-$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)}
[ -n "$NCU" ] || { echo "ncu_wgmma: no ncu on this machine (set NCU=/path/to/ncu)"; exit 2; }
CASES=${CASES:-"mxfp4:128:8192x8192 mxfp4:128:28672x8192 mxfp4:64:8192x8192"}
SECTIONS="--section SpeedOfLight --section LaunchStats --section Occupancy \
  --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section InstructionStats"
CASE_PY="$OUT/.ncu_case.py"
cat > "$CASE_PY" <<'EOF'
import sys
import torch
from kernels.base import load_kernel
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton.linear_emulation import fused_linear
fmt, m, n, k = sys.argv[1], *map(int, sys.argv[2:])
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
p = load_kernel("triton-emulation").prepare(
    w, SchemeContract(weight=QuantKey.mx(fmt, rounding="even", static=True), activation=None))
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
for _ in range(3):  # two warm-up launches (compile, plan), the third is profiled
    fused_linear(x, p)
torch.cuda.synchronize()
EOF
profile() {  # profile REPORT NCU-ARGS...: the third launch of the case's wgmma kernel
  local report=$1; shift
  timeout "${CASE_S:-150}" "$NCU" --kernel-name regex:_wgmma_linear_kernel --launch-skip 2 \
    --launch-count 1 "$@" python3 "$CASE_PY" "$fmt" "$m" "$n" "$k" > "$report" 2>&1
}
for case in $CASES; do
  IFS=: read -r fmt m shape <<< "$case"
  n=${shape%x*}; k=${shape#*x}
  report="$OUT/ncu_${fmt}_${m}_${shape}.txt"
  echo "=== $case"
  # shellcheck disable=SC2086
  profile "$report" $SECTIONS --print-summary none
  echo "rc=$? $(grep -cE 'Duration|Stall' "$report") lines of note -> $report"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Compute \(SM\) Thr|Memory Thr|L2 Cache Thr|DRAM Thr" "$report" | head -12
  if [ -n "${STALLS:-}" ]; then  # where the warps wait: the stall reasons an issued instruction,
    # and the sampled stalls of each SASS instruction (ncu's source page, CSV)
    profile "$OUT/stalls_${fmt}_${m}_${shape}.txt" --print-summary none \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
    grep -E "stalled_" "$OUT/stalls_${fmt}_${m}_${shape}.txt" | sort -k3 -g -r | head -8
    profile "$OUT/sass_${fmt}_${m}_${shape}.csv" --section SourceCounters --page source \
      --print-source sass --csv
    echo "sass page: $(wc -l < "$OUT/sass_${fmt}_${m}_${shape}.csv") lines"
  fi
done
rm -f "$CASE_PY"
