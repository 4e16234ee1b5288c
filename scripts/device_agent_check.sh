#!/usr/bin/env bash
# The host agent on a real GPU machine, next to nvidia-smi. Run from anywhere: bash scripts/device_agent_check.sh
# Needs python3 with torch and pynvml, and nvidia-smi; nothing of kimitui installed, no network.
# Starts a torch holder (8 GB on GPU0, 4 GB on GPU1 where there is one) and an NVML-only monitor, runs the
# agent directly, through the bootstrap and on the nvidia-smi fallback, prints its figures and classes next
# to nvidia-smi's, the per-sample cost, then kills what it started and times the memory's return.
# Outputs go to $OUT (a temporary folder when unset). Under 2 minutes.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
AGENT=(env PYTHONPATH="$ROOT" "${PYTHON:-python3}" -u -m kimitui.hostside.agent)  # from the tree, no bootstrap
OUT=${OUT:-$(mktemp -d /tmp/kimitui-device-XXXXXX)}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/kimitui-work-XXXXXX)
PY=${PYTHON:-python3}
STARTED=()

say() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }
cleanup() {
  local p
  for p in "${STARTED[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${STARTED[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
since() { $PY -c 'import sys, time; print("%.3f" % (time.time() - float(sys.argv[1])))' "$1"; }
wait_for() {  # wait_for FILE WORD SECONDS: poll until FILE has WORD
  local end=$((SECONDS + $3))
  while [ $SECONDS -lt $end ]; do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

say "# kimitui agent check on $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi -L | tee "$OUT/gpus.txt"
NGPU=$(grep -c '^GPU' "$OUT/gpus.txt")
say "GPUs: $NGPU; python: $($PY -c 'import sys; print(sys.version.split()[0])')"

cat > "$WORK/holder.py" <<'EOF'
import time, torch
n = torch.cuda.device_count()
x = torch.empty(int(8e9), dtype=torch.uint8, device="cuda:0")
y = torch.empty(int(4e9), dtype=torch.uint8, device="cuda:1") if n > 1 else None
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(600)
EOF
cat > "$WORK/monitor.py" <<'EOF'
import time, pynvml
pynvml.nvmlInit()
hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
print("ready", flush=True)
while True:
    for h in hs:
        pynvml.nvmlDeviceGetMemoryInfo(h)
    time.sleep(0.2)
EOF

$PY "$WORK/holder.py" > "$OUT/holder.out" 2>&1 &
HOLDER=$!; STARTED+=("$HOLDER")
$PY "$WORK/monitor.py" > "$OUT/monitor.out" 2>&1 &
MONITOR=$!; STARTED+=("$MONITOR")
wait_for "$OUT/monitor.out" ready 30 || say "monitor did not start: $(tail -3 "$OUT/monitor.out")"
wait_for "$OUT/holder.out" ready 90 || { say "holder did not start: $(tail -3 "$OUT/holder.out")"; exit 1; }
say "holder pid $HOLDER (torch), monitor pid $MONITOR (NVML only)"

# 1. the agent run directly; stdin is a pipe that closes after ~1.8 s, so it exits on its own (liveness)
T0=$(date +%s.%N)
sleep 1.8 | timeout 20 "${AGENT[@]}" --sample --interval 0.5 > "$OUT/agent-direct.jsonl"
say "agent direct: rc $? after $(since "$T0") s, $(grep -c '"sample"' "$OUT/agent-direct.jsonl") samples"
# 2. the nvidia-smi fallback
sleep 1.2 | timeout 30 "${AGENT[@]}" --sample --interval 0.5 --no-nvml > "$OUT/agent-smi.jsonl"
say "agent nvidia-smi fallback: rc $?, $(grep -c '"sample"' "$OUT/agent-smi.jsonl") samples"
nvidia-smi --query-gpu=index,uuid,memory.used,memory.reserved,memory.total,utilization.gpu,temperature.gpu,power.draw,clocks.current.sm \
  --format=csv > "$OUT/query-gpu.csv" 2>&1
nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid --format=csv > "$OUT/query-apps.csv" 2>&1
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1

# 3. through the bootstrap, as TelemetrySource starts it (source sent on stdin, length-prefixed)
cat > "$WORK/bootstrap.py" <<'EOF'
import subprocess, sys, time, json
sys.path.insert(0, sys.argv[1])
from kimitui.hosts import launch as agent  # stdlib only: the payload's builder reads kimitui/hostside
p = subprocess.Popen(agent.agent_command("python3", ("--sample", "--interval", "0.5")), stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE)
p.stdin.write(agent.agent_payload()); p.stdin.flush()
lines = [p.stdout.readline().decode() for _ in range(4)]
t0 = time.monotonic(); p.stdin.close(); rc = p.wait(timeout=10)
open(sys.argv[2], "w").write("".join(lines))
print("bootstrap: %s, then %d samples; exit %d %.0f ms after stdin closed"
      % (json.loads(lines[0]).get("type"), sum('"sample"' in l for l in lines), rc, (time.monotonic() - t0) * 1e3))
EOF
$PY "$WORK/bootstrap.py" "$ROOT" "$OUT/agent-bootstrap.jsonl" 2>&1 | tee -a "$OUT/summary.txt"

# 4. the agent's figures next to nvidia-smi's, and the classes it gave
cat > "$WORK/compare.py" <<'EOF'
import csv, io, json, sys
out, holder, monitor = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def last_sample(path):
    s = [json.loads(l) for l in open(path) if '"sample"' in l]
    return s[-1] if s else None
def num(c):
    c = c.strip().split()[0] if c.strip() else ""
    try: return float(c)
    except ValueError: return None
smi = list(csv.reader(io.StringIO(open(out + "/query-gpu.csv").read())))[1:]
apps = list(csv.reader(io.StringIO(open(out + "/query-apps.csv").read())))[1:]
ok = True
for name in ("agent-direct", "agent-smi"):
    s = last_sample("%s/%s.jsonl" % (out, name))
    if s is None:
        print(name, ": NO SAMPLE"); ok = False; continue
    print("\n== %s (source %s, agent pid %s)" % (name, s["source"], s["agent_pid"]))
    print("gpu  agent used/reserved/total MiB      nvidia-smi used/reserved/total MiB   util temp power sm  error")
    for g in s["gpus"]:
        row = next((r for r in smi if int(r[0]) == g["index"]), None)
        sm = [num(c) for c in row[2:5]] if row else [None] * 3
        print("%-4d %9s %6s %7s      %9s %6s %7s   %4s %4s %5s %5s %s" % (g["index"], g["mem_used_mib"],
              g["mem_reserved_mib"], g["mem_total_mib"], sm[0], sm[1], sm[2], g["util_pct"], g["temp_c"],
              g["power_w"], g["sm_clock_mhz"], g["error"]))
        if sm[0] is not None and g["mem_used_mib"] is not None and abs(sm[0] - g["mem_used_mib"]) > 64:
            print("  MISMATCH used: agent %s vs nvidia-smi %s" % (g["mem_used_mib"], sm[0])); ok = False
    print("pid      kind    gpus   mem MiB by GPU            flags                  user  cmdline")
    for p in s["procs"]:
        print("%-8d %-7s %-6s %-25s %-22s %-5s %s" % (p["pid"], p["kind"], p["gpus"], p["gpu_mem_mib"],
              p["flags"], p["user"], p["cmdline"][:60]))
    print("nvidia-smi --query-compute-apps:")
    for r in apps:
        print("  " + ", ".join(c.strip() for c in r))
    kinds = {p["pid"]: p["kind"] for p in s["procs"]}
    for pid, want in ((holder, "cuda"), (monitor, "handle")):
        got = kinds.get(pid)
        print("%s: pid %d is %s (expected %s)" % ("PASS" if got == want else "FAIL", pid, got, want))
        ok = ok and got == want
    if s["agent_pid"] in kinds:
        print("FAIL: the agent lists itself"); ok = False
    hm = next((p["gpu_mem_mib"] for p in s["procs"] if p["pid"] == holder), {})
    for r in apps:
        if r and int(r[0]) == holder:
            idx = next((g["index"] for g in s["gpus"] if g["uuid"] == r[3].strip()), None)
            a, b = hm.get(str(idx)), num(r[2])
            good = a is not None and b is not None and abs(a - b) <= 2
            print("%s: holder memory on GPU %s: agent %s MiB, nvidia-smi %s MiB" % ("PASS" if good else "FAIL", idx, a, b))
            ok = ok and good
print("\nOVERALL:", "PASS" if ok else "FAIL")
EOF
$PY "$WORK/compare.py" "$OUT" "$HOLDER" "$MONITOR" 2>&1 | tee -a "$OUT/summary.txt"

# 5. the per-sample cost (stdlib + pynvml only)
say ""
timeout 60 $PY "$ROOT/benchmarks/telemetry.py" --only agent-cost --samples 2000 2>&1 | tee -a "$OUT/summary.txt"

# 6. kill the holder while an agent samples at 10 Hz; time until nvidia-smi and the agent see the memory back
say ""
(sleep 12 | "${AGENT[@]}" --sample --interval 0.1 > "$OUT/agent-release.jsonl") &
RELEASE_AGENT=$!; STARTED+=("$RELEASE_AGENT")
wait_for "$OUT/agent-release.jsonl" '"sample"' 10
KILL_T=$(date +%s.%N)
kill -TERM "$HOLDER"
END=$((SECONDS + 30)); BACK=""
while [ $SECONDS -lt $END ]; do
  used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | awk '{s+=$1} END {print s}')
  if [ "${used:-1}" -lt 64 ]; then BACK=$(since "$KILL_T"); break; fi
  sleep 0.05
done
say "holder SIGTERM -> nvidia-smi memory back after ${BACK:-NOT WITHIN 30} s"
kill -TERM "$MONITOR" 2>/dev/null
wait "$HOLDER" 2>/dev/null; wait "$MONITOR" 2>/dev/null
wait "$RELEASE_AGENT" 2>/dev/null
$PY - "$OUT/agent-release.jsonl" "$KILL_T" "$HOLDER" <<'EOF' 2>&1 | tee -a "$OUT/summary.txt"
import json, sys
kill_t, holder = float(sys.argv[2]), int(sys.argv[3])
for line in open(sys.argv[1]):
    s = json.loads(line)
    if s.get("type") == "sample" and s["t"] > kill_t and all(p["pid"] != holder for p in s["procs"]) \
            and all((g["mem_used_mib"] or 0) < 64 for g in s["gpus"]):
        print("agent (10 Hz): holder gone and memory back in the sample %.3f s after SIGTERM (seq %d)"
              % (s["t"] - kill_t, s["seq"]))
        break
else:
    print("agent: memory NOT seen back")
EOF
left=""
for p in "${STARTED[@]}"; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
say "processes left behind:${left:- none}"
say "outputs in $OUT"
