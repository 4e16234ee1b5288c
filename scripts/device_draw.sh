#!/usr/bin/env bash
# Issue 20's draw and start figures on a real GPU host (from the repository root, wheels in .whl/ as
# scripts/device_run.sh installs them): the local dashboard's start (benchmarks/startup.py --only local),
# kimitui's local dashboard beside nvitop on the same host (benchmarks/vs_nvitop.py: start, bytes per 30 s,
# CPU), and the dashboard's bytes and CPU on the simulated 8 GPUs x 64 processes (benchmarks/telemetry.py
# --only dashboard-cpu) on a quiet machine, and kimitui demo's first 5 s (--only first-paint). Writes $OUT/draw.txt.
set -uo pipefail
OUT=${OUT:-/tmp/kimitui-device-draw}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
unset PYTHONDONTWRITEBYTECODE  # bytecode written and used, as an install has it
$PY -m compileall -q -j 0 kimitui ${PYTHONPATH:+$(echo "$PYTHONPATH" | tr ':' ' ')} >/dev/null 2>&1
{
  echo "== $(date -u +%H:%M:%S) what the app's import costs here (python -X importtime, second run, cumulative ms)"
  $PY -c "import kimitui.tui.app" 2>/dev/null
  $PY -X importtime -c "import kimitui.tui.app" 2>&1 | sort -t'|' -k2 -n | tail -12 \
    | awk -F'|' '{printf "  %7.0f ms  %s\n", $2 / 1000, $3}'
  echo "== $(date -u +%H:%M:%S) startup (local dashboard, first frame with this host's GPUs)"
  timeout 120 $PY benchmarks/startup.py --only local --runs 5 2>&1
  echo "== $(date -u +%H:%M:%S) kimitui beside nvitop"
  timeout 300 $PY benchmarks/vs_nvitop.py --runs 3 --seconds 30 2>&1
  echo "== $(date -u +%H:%M:%S) kimitui demo's first 5 s on a 120x40 pty (issue 37: <= 14 KB)"
  timeout 120 $PY benchmarks/telemetry.py --only first-paint --runs 3 --dump "$OUT/first-paint.bin" 2>&1
  echo "== $(date -u +%H:%M:%S) dashboard on the simulated host, 8 GPUs x 64 processes at 2 Hz"
  timeout 200 $PY benchmarks/telemetry.py --only dashboard-cpu 2>&1
  echo "== $(date -u +%H:%M:%S) done"
} > "$OUT/draw.txt"
