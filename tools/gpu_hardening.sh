#!/usr/bin/env bash
# The hardening checks on a GPU (issue 7): `lint --probe` (recorded) and `registry doctor`, the
# determinism tool, then the bad-tensor / determinism / concurrency / no-fallback tests compiled
# for real. STEPS picks a subset (e.g. STEPS="doctor determinism"); logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export REGISTRY_CACHE_DIR=${REGISTRY_CACHE_DIR:-$OUT/cache}
source "$(dirname "$0")/device_wheels.sh"  # pydantic / jsonschema from .whl/ where missing
STEPS=${STEPS:-doctor determinism pytest}
step() { local name=$1 limit=$2; shift 2; case " $STEPS " in *" $name "*) ;; *) return;; esac
         echo; echo "=== $name"; timeout "$limit" "$@"; echo "=== $name rc=$?"; }
step doctor "${DOCTOR_S:-150}" sh -c "python3 -m registry lint --probe > $OUT/probe.txt 2>&1; tail -2 $OUT/probe.txt; python3 -m registry doctor > $OUT/doctor.txt 2>&1; python3 -m registry doctor --json > $OUT/doctor.json 2>&1; cat $OUT/doctor.txt"
step determinism "${DET_S:-240}" sh -c "python3 tools/check_determinism.py ${DET_ARGS:-} --out $OUT/determinism.json > $OUT/determinism.md 2> $OUT/determinism.err; rc=\$?; tail -5 $OUT/determinism.md; grep -E '\| (NO|not run) \|' $OUT/determinism.md | head -30; tail -3 $OUT/determinism.err; exit \$rc"
step pytest "${PYTEST_S:-400}" sh -c "python3 -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-tests/kernels/test_bad_tensors_codec.py tests/kernels/test_bad_tensors_linear.py tests/registry/nn/test_bad_tensors_model.py tests/project/test_no_silent_fallback.py tests/kernels/test_concurrency.py} > $OUT/pytest.log 2>&1; rc=\$?; grep -E '^(FAILED|ERROR)' $OUT/pytest.log | head -40; tail -3 $OUT/pytest.log; exit \$rc"
