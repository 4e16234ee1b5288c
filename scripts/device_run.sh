#!/usr/bin/env bash
# kimitui's checks on a real GPU machine, by part, from the repository root:
#
#     OUT=/some/dir bash scripts/device_run.sh agent watch cleanup micro loadgen
#
# Needs python3 with torch and pynvml, and nvidia-smi. kimitui runs from this checkout (PYTHONPATH); its
# other dependencies (textual, httpx, asyncssh, ...) are installed from wheels in .whl/ (scripts/device_wheels.sh fetches them) when that folder
# exists, into a private folder (nothing is installed on the machine itself). Each part writes its files
# under $OUT/work/PART and a few lines to $OUT/summary.txt; everything is packed into $OUT/device-run.tgz.
#   agent    scripts/device_agent_check.sh: the agent next to nvidia-smi, its classes, cost, release time
#   watch    `kimitui watch --host local --json` beside a torch holder, against nvidia-smi
#   cleanup  scripts/device_cleanup_demo.sh: a torch service tree freed by the real cleanup (recorded), its
#            verdict timed against the driver's own release (NVML read every 1 ms)
#   safety   scripts/device_safety.py: only the service is cleaned, another GPU holder only with `others`, a
#            stand-in nvidia-persistenced and an NVML monitor spared, a worker whose name is not UTF-8 cleaned
#   orphans  scripts/device_orphans.py: a torch holder SIGKILLed while two forked workers keep its memory: shown as
#            kind exited held by them, previewed as theirs, freed by the cleanup's others step
#   pgrp     scripts/device_pgrp.py: a torch main whose end orphans its process group with a stopped child: the
#            child and a helper previewed as dying with it, the main refused unless the helper is ticked, and the
#            kernel's SIGHUP ending them when the main ends
#   micro    scripts/device_micro.sh: the GEMM benchmark through the host program, fidelity, cancel
#   loadgen  benchmarks/loadgen.py --quick --servers sim,burst (with and without /metrics reads), pinned to 2 cores
#   campaign scripts/device_campaign.sh: the whole campaign headless against a stand-in for vLLM
#   tfcampaign scripts/device_tf_campaign.sh: the same against transformers serve on the GPU (a real engine)
#   budget   scripts/device_model_budget.sh: the analysis against transformers serve serving random models of two
#            real families (Llama-3-8B's shapes, Qwen3-30B-A3B's on 12 layers), found from the server, beside a
#            plain torch timing of the models' own linears (issue 35 item 4)
#   record   `kimitui record --host local` beside a torch holder for 15 s (stopped with SIGINT), then the run
#            replayed (--summary) and read back: the headless recorder on a real driver
#   clocks   scripts/device_clocks.py: NVML's clock calls as kimitui/hostside/clocks.py makes them, idle and after
#            a burst of big GEMMs; then `kimitui bench micro --host local --gemm --json`: each row's SM clock and caps
#   paint    kimitui demo's first 5 s on a 120x40 pty (benchmarks/telemetry.py --only first-paint), bytecode
#            compiled, the last run's bytes and reads kept (work/paint/first-paint.bin, .reads)
#   draw     scripts/device_draw.sh: the local dashboard's start, beside nvitop (start, bytes, CPU), the dashboard's
#            bytes and CPU on 8 simulated GPUs x 64 processes
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kimitui-device-run}
mkdir -p "$OUT/work"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kimitui-site \
    .whl/*.whl >/dev/null 2>&1 || echo "wheels did not install" >> "$OUT/summary.txt"
  export PYTHONPATH="$PWD:/tmp/kimitui-site${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
say() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }
status=0

part_agent() {
  OUT="$OUT/work/agent" timeout 170 bash scripts/device_agent_check.sh > "$OUT/work/agent.log" 2>&1
  grep -E "PASS|FAIL|OVERALL|agent |holder|cost|left behind" "$OUT/work/agent/summary.txt" | head -30 >> "$OUT/summary.txt"
}

part_watch() {
  local d="$OUT/work/watch"; mkdir -p "$d"
  $PY -c 'import time, torch; x = torch.empty(int(6e9), dtype=torch.uint8, device="cuda:0"); torch.cuda.synchronize(); print("ready", flush=True); time.sleep(120)' > "$d/holder.out" 2>&1 &
  local holder=$!
  for _ in $(seq 1 300); do grep -q ready "$d/holder.out" 2>/dev/null && break; sleep 0.2; done
  XDG_DATA_HOME="$d/data" timeout 60 $PY -m kimitui watch --host local --count 6 --interval 0.25 --json \
    > "$d/watch.jsonl" 2> "$d/watch.err"
  say "watch: rc $? ($(wc -l < "$d/watch.jsonl") samples); $(tail -1 "$d/watch.err")"
  nvidia-smi --query-gpu=index,memory.used,memory.reserved --format=csv,noheader > "$d/smi.csv"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader > "$d/apps.csv"
  $PY - "$d/watch.jsonl" "$d/smi.csv" "$d/apps.csv" "$holder" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
s = json.loads(open(sys.argv[1]).read().splitlines()[-1])
smi = {int(r.split(",")[0]): float(r.split(",")[1].split()[0]) for r in open(sys.argv[2]) if r.strip()}
holder = int(sys.argv[4])
for g in s["gpus"]:
    print("watch: GPU %d used %.1f MiB (nvidia-smi %s MiB), reserved %s MiB, boot_time %s, ticks %s"
          % (g["index"], g["mem_used_mib"], smi.get(g["index"]), g["mem_reserved_mib"], s.get("boot_time"),
             s.get("clock_ticks")))
p = [p for p in s["procs"] if p["pid"] == holder]
print("watch: holder pid %d: %s" % (holder, p[0]["kind"] + " " + json.dumps(p[0]["gpu_mem_mib"]) if p else "NOT SEEN"))
print("watch: nvidia-smi apps: " + " ".join(l.strip() for l in open(sys.argv[3])))
EOF
  kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
  return 0  # the holder's own exit status (killed) is not the part's
}

part_cleanup() {
  local d="$OUT/work/cleanup"; mkdir -p "$d"
  OUT="$d" bash scripts/device_cleanup_demo.sh --gib 40 --hold-s 8 --after-s 4 --interval 0.05 > "$d/demo.log" 2>&1
  local rc=$?
  say "cleanup demo: rc $rc"
  grep -E "consent|clean|monitor|CLEAN|signal ->|stuck|released" "$d/demo.log" | tail -12 >> "$OUT/summary.txt"
  [ -f "$d/cleanup-demo.jsonl" ] && gzip -f "$d/cleanup-demo.jsonl"
  # the headless CLI on a fresh tree: previews, consents, signals, verify
  [ $rc -eq 0 ] || status=1
}

part_safety() {
  local d="$OUT/work/safety"; mkdir -p "$d"
  timeout 400 $PY scripts/device_safety.py --out "$d" --gib 8 > "$d/run.log" 2>&1
  local rc=$?
  say "safety: rc $rc"
  cat "$d/safety.txt" >> "$OUT/summary.txt" 2>/dev/null
  [ $rc -eq 0 ] || status=1
}

part_orphans() {
  local d="$OUT/work/orphans"; mkdir -p "$d"
  timeout 300 $PY scripts/device_orphans.py --out "$d" > "$d/run.log" 2>&1
  local rc=$?
  say "orphans: rc $rc"
  cat "$d/orphans.txt" >> "$OUT/summary.txt" 2>/dev/null
  [ $rc -eq 0 ] || status=1
}

part_pgrp() {
  local d="$OUT/work/pgrp"; mkdir -p "$d"
  timeout 300 $PY scripts/device_pgrp.py --out "$d" > "$d/run.log" 2>&1
  local rc=$?
  say "pgrp: rc $rc"
  cat "$d/pgrp.txt" >> "$OUT/summary.txt" 2>/dev/null
  [ $rc -eq 0 ] || status=1
}

part_micro() {
  local d="$OUT/work/micro"; mkdir -p "$d"
  OUT="$d" timeout 420 bash scripts/device_micro.sh > "$d/run.log" 2>&1
  say "micro: rc $?"
  grep -E "within|drained|OFF" "$d/fidelity.txt" | tail -8 >> "$OUT/summary.txt"
  tail -4 "$d/cancel.txt" >> "$OUT/summary.txt"
}

part_loadgen() {
  local d="$OUT/work/loadgen"; mkdir -p "$d"
  timeout 300 taskset -c 0,1 $PY benchmarks/loadgen.py --quick --servers sim,burst --clients lean,httpx > "$d/loadgen.txt" 2>&1
  say "loadgen (taskset -c 0,1): rc $?"
  grep -E "tok/s|ITL|floor|PASS|MISS|metrics read" "$d/loadgen.txt" | head -20 >> "$OUT/summary.txt"
}

part_campaign() {
  local d="$OUT/work/campaign"; mkdir -p "$d"
  OUT="$d" timeout 560 bash scripts/device_campaign.sh > "$d/run.log" 2>&1
  say "campaign: rc $?"
  cat "$d/campaign.txt" >> "$OUT/summary.txt"
}

part_tfcampaign() {
  local d="$OUT/work/tfcampaign"; mkdir -p "$d"
  OUT="$d" timeout 570 bash scripts/device_tf_campaign.sh > "$d/run.log" 2>&1
  say "tfcampaign: rc $?"
  cat "$d/campaign.txt" >> "$OUT/summary.txt"
}

part_budget() {
  local d="$OUT/work/budget"; mkdir -p "$d"
  OUT="$d" timeout "${BUDGET_TIMEOUT_S:-590}" bash scripts/device_model_budget.sh > "$d/run.log" 2>&1
  say "budget: rc $?"
  cat "$d/budget.txt" >> "$OUT/summary.txt"
}

part_record() {
  local d="$OUT/work/record"; mkdir -p "$d"
  $PY -c 'import time, torch; x = torch.empty(int(3e9), dtype=torch.uint8, device="cuda:0"); torch.cuda.synchronize(); print("ready", flush=True); time.sleep(120)' > "$d/holder.out" 2>&1 &
  local holder=$!
  for _ in $(seq 1 300); do grep -q ready "$d/holder.out" 2>/dev/null && break; sleep 0.2; done
  XDG_DATA_HOME="$d/data" timeout -s INT 15 $PY -m kimitui record --host local -o "$d/local.jsonl.gz" \
    --interval 0.25 > "$d/record.out" 2> "$d/record.err"
  say "record: rc $? (SIGINT after 15 s); $(tail -2 "$d/record.err" | tr '\n' ' ')"
  ls -l "$d"/local.jsonl.gz* | awk '{print "record: " $5 " bytes " $9}' | tee -a "$OUT/summary.txt"
  XDG_DATA_HOME="$d/data" timeout 60 $PY -m kimitui replay "$d/local.jsonl.gz" --summary > "$d/summary.txt" 2>&1
  say "record: replay --summary rc $?"
  head -20 "$d/summary.txt" | sed 's/^/record:   /' | tee -a "$OUT/summary.txt"
  $PY scripts/device_record_check.py "$d/local.jsonl.gz" "$holder" | tee -a "$OUT/summary.txt"
  kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
  return 0
}

part_clocks() {
  local d="$OUT/work/clocks"; mkdir -p "$d"
  $PY scripts/device_clocks.py 2>&1 | tee -a "$OUT/summary.txt"
  XDG_DATA_HOME="$d/data" timeout -s INT 200 $PY -m kimitui bench micro --host local --gemm --json > "$d/micro.jsonl" \
    2> "$d/micro.err"
  say "clocks: bench micro rc $? ($(grep -c gemm_row "$d/micro.jsonl") rows)"
  $PY scripts/device_clocks.py --rows "$d/micro.jsonl" 2>&1 | tee -a "$OUT/summary.txt"
  local run; run=$(ls -t "$d"/data/kimitui/runs/*.jsonl 2>/dev/null | head -1)
  if [ -n "$run" ]; then
    $PY -m kimitui report "$run" > "$d/report.md" 2>&1
    grep -i -E "clock|throttl|cap" "$d/report.md" | head -5 | sed 's/^/clocks: report: /' | tee -a "$OUT/summary.txt"
  fi
  return 0
}

part_draw() {
  local d="$OUT/work/draw"; mkdir -p "$d"
  OUT="$d" timeout 590 bash scripts/device_draw.sh > "$d/run.log" 2>&1
  say "draw: rc $?"
  cat "$d/draw.txt" >> "$OUT/summary.txt"
}

part_paint() {
  local d="$OUT/work/paint"; mkdir -p "$d"
  (unset PYTHONDONTWRITEBYTECODE; $PY -m compileall -q -j 0 kimitui /tmp/kimitui-site >/dev/null 2>&1
   timeout 120 $PY benchmarks/telemetry.py --only first-paint --runs 3 --dump "$d/first-paint.bin") 2>&1 \
    | tee -a "$OUT/summary.txt"
}

for part in "$@"; do
  say "== $part $(date -u +%H:%M:%S)"
  "part_$part" || status=1
done
tar -czf "$OUT/device-run.tgz" -C "$OUT" work 2>/dev/null
rm -rf "$OUT/work"
say "== done (status $status)"
exit $status
