#!/usr/bin/env bash
# Fetch, on this machine, the wheels the lent GPU image lacks into .whl/ (git-ignored), for
# tools/device_wheels.sh to install there: pydantic and jsonschema with their needs, and the
# peer kernel humming-kernels (tools/bench_peer.py; its needs are in the image). Calls that use
# them name ".whl" in the device tool's `carry`. A fresh checkout may not have .whl/ (it did not
# on 2026-12-07 22:29): run this first.
#   bash tools/fetch_device_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# the image's python is 3.12 on x86-64 (../.library/device/KINDS.md); one version of each
# package, or the install there stops: start from an empty folder
rm -rf .whl && mkdir .whl
plat=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl)
python3 -m pip download -q "${plat[@]}" pydantic jsonschema 2> >(grep -v "^WARNING: Location" >&2)
python3 -m pip download -q "${plat[@]}" --no-deps humming-kernels==0.1.19 \
  2> >(grep -v "^WARNING: Location" >&2)
# attrs (jsonschema's need) is in the image already: carrying another version would shadow it
rm -f .whl/attrs-*.whl
ls .whl
du -sh .whl  # the device tool carries at most 64 MiB a call, working tree included
