#!/usr/bin/env bash
# The whole campaign headless on a real GPU host (from the repository root; run by scripts/device_run.sh):
# a supervisord-managed stand-in for vLLM (scripts/device_llm_service.py: real torch workers holding GPU
# memory, one of them ignoring SIGTERM, and a streaming OpenAI-compatible server), an NVML-only monitor
# that must survive, and `kimitui campaign FILE --headless`: macro against the server, the transition
# (drain, supervisorctl stop, the stuck worker killed, verify), micro on the freed GPU, the analysis, the
# service restarted through supervisorctl, the post-restart check. Then `kimitui report RUN`.
# Needs the supervisor package (carried as a wheel) and python3 with torch and pynvml. Writes under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/kimitui-device-campaign}
W=$(mktemp -d /tmp/kc-XXXXXX)
mkdir -p "$OUT" "$W/bin"
PY=${PYTHON:-python3}
. scripts/device_supervisor.sh
supervisor_shim "$W" "$PY"
export PATH="$W/bin:$PATH" XDG_DATA_HOME="$OUT/data"
supervisor_conf "$W" llm "$PY $PWD/scripts/device_llm_service.py --port 8000 --gib 40" "PYTHONPATH=\"${PYTHONPATH:-}\"" 10
$PY -m supervisor.supervisord -c "$W/supervisord.conf"
$PY -c 'import time, pynvml
pynvml.nvmlInit(); hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
while True:
    [pynvml.nvmlDeviceGetMemoryInfo(h) for h in hs]; time.sleep(0.2)' > "$W/monitor.out" 2>&1 &
MON=$!
$PY - <<'PYEOF'
import time, urllib.request
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=2).read()
        break
    except Exception:
        time.sleep(0.2)
PYEOF
echo "service: $(supervisorctl -c "$W/supervisord.conf" status llm)" | tee "$OUT/campaign.txt"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tee -a "$OUT/campaign.txt"
cat > "$OUT/campaign.toml" <<TOML
[campaign]
name = "kimitui on one H200 (a stand-in for vLLM)"
host = "local"
sample_interval_s = 0.25
[service]
spec = "supervisor:llm@$W/supervisord.conf"
api_url = "http://127.0.0.1:8000"
[consent]
drain = "yes"
graceful = "yes"
process = "yes"
others = "no"
device = "yes"
reset = "no"
restart = "yes"
abort_restart = "yes"
[macro]
concurrency = [1, 4, 16, 64]
requests = "2x"
max_tokens = 64
input_len = 128
[cleanup]
drain_s = 30
graceful_s = 15
term_grace_s = 3
[micro]
parts = ["gemm", "allreduce"]
tp = 8
[restart]
health_s = 120
[check]
requests = 3
TOML
timeout 480 $PY -m kimitui campaign "$OUT/campaign.toml" --headless > "$OUT/campaign.out" 2> "$OUT/campaign.err"
echo "campaign exit status $?" | tee -a "$OUT/campaign.txt"
tail -25 "$OUT/campaign.err" >> "$OUT/campaign.txt"
RUN=$(ls -t "$XDG_DATA_HOME"/kimitui/runs/*.jsonl 2>/dev/null | head -1)
if [ -n "$RUN" ]; then
  $PY -m kimitui report "$RUN" > "$OUT/campaign-report.md" 2>&1
  $PY -m kimitui replay --summary "$RUN" >> "$OUT/campaign.txt" 2>&1
  gzip -c "$RUN" > "$OUT/h200-campaign.jsonl.gz"
fi
echo "monitor pid $MON alive after the campaign: $(kill -0 $MON 2>/dev/null && echo yes || echo NO)" | tee -a "$OUT/campaign.txt"
echo "service after the campaign: $(supervisorctl -c "$W/supervisord.conf" status llm)" | tee -a "$OUT/campaign.txt"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tee -a "$OUT/campaign.txt"
# teardown: the restarted service's process group (supervisord makes each program a group leader)
PGID=$(supervisorctl -c "$W/supervisord.conf" pid llm 2>/dev/null)
supervisorctl -c "$W/supervisord.conf" stop llm >/dev/null 2>&1
case "$PGID" in ''|*[!0-9]*|0) ;; *) kill -KILL -- "-$PGID" 2>/dev/null ;; esac
supervisorctl -c "$W/supervisord.conf" shutdown >/dev/null 2>&1
kill $MON 2>/dev/null
rm -rf "$OUT/data"
