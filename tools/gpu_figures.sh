#!/usr/bin/env bash
# The issues' figures in one GPU call, each step with its own limit (seconds): `registry bench`
# of the six schemes on the three dense shapes, the peer (humming-kernels, carried in .whl/)
# beside ours on the same shapes, `registry bench --moe`, and the quantize table. Eight files
# come back under $OUT (the device tool's limit); the MoE and quantize tables print to stdout.
#   OUT=$OUT bash tools/gpu_figures.sh            (STEPS="bench peer moe quant" by default)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source "$(dirname "$0")/device_wheels.sh"  # pydantic / jsonschema / humming-kernels from .whl/
SHAPES=${SHAPES:-8192x8192,28672x8192,8192x28672}
MS=${MS:-1,16,64,128,1024,4096}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
step() { local name=$1 limit=$2; shift 2; echo "=== $name"; timeout "$limit" "$@"
         echo "=== $name rc=$? $(date -u +%H:%M:%S)"; }
for s in ${STEPS:-bench peer moe quant}; do case $s in
  bench) step bench "${BENCH_S:-200}" sh -c "python3 -m registry bench w_mxfp4 w_mxfp4_a_mxfp4 \
    w_mxfp6_e3m2 w_mxfp6_e3m2_a_mxfp6_e3m2 w_mxfp8_e4m3 w_mxint8_a_mxint8 --shapes $SHAPES \
    --m $MS --plot $OUT/bench.png --out $OUT/bench.json > $OUT/bench.txt 2>&1; tail -3 $OUT/bench.txt" ;;
  peer) step peer "${PEER_S:-240}" sh -c "python3 tools/bench_peer.py --shapes $SHAPES --m $MS \
    --out $OUT/peer.json > $OUT/peer.md 2> /tmp/peer.err; cat $OUT/peer.md; tail -5 /tmp/peer.err" ;;
  moe) step moe "${MOE_S:-120}" python3 -m registry bench w_mxfp4 w_mxfp4_a_mxfp4 \
    w_mxfp6_e3m2_a_mxfp6_e3m2 --moe --plot "$OUT/moe.png" --out "$OUT/moe.json" ;;
  quant) step quant "${QUANT_S:-120}" python3 tools/bench_quant.py --roundings even \
    --no-reference-time --out "$OUT/quant.json" ;;
  *) echo "gpu_figures: unknown step '$s'; use bench, peer, moe or quant" >&2; exit 2 ;;
esac; done
