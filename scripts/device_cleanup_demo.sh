#!/usr/bin/env bash
# The cleanup escalation on real GPUs (see scripts/device_cleanup_demo.py). Needs python3 with torch and
# pynvml; kimitui travels with the repo. With OUT set, the session is recorded to $OUT/cleanup-demo.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
exec timeout 180 "${PYTHON:-python3}" scripts/device_cleanup_demo.py "$@"
