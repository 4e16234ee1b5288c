#!/usr/bin/env bash
# The whole suite N times in a row (default 5) with two busy-loop CPU hogs beside it, as issue 31 asks the suite
# to stand: stops at the first failing run. One line a run in $OUT (default /tmp/suite-under-load.txt), each
# run's log beside it. Run from a clone's root: bash scripts/suite_under_load.sh [N]
set -u
cd "$(dirname "$0")/.."
runs=${1:-5}
out=${OUT:-/tmp/suite-under-load.txt}
sh -c 'while :; do :; done' & h1=$!
sh -c 'while :; do :; done' & h2=$!
trap 'kill $h1 $h2 2>/dev/null' EXIT
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  ./run-tests </dev/null > "$out.$i.log" 2>&1
  rc=$?
  echo "run $i rc=$rc wall=$(( $(date +%s) - start ))s $(tail -n 1 "$out.$i.log")" | tee -a "$out"
  [ "$rc" -eq 0 ] || exit "$rc"
done
