#!/usr/bin/env bash
# The whole campaign headless on a real GPU host against a real third-party engine (from the repository root;
# run by scripts/device_run.sh): `transformers serve` on the GPU (the suite's tiny random Llama, made here:
# nothing is downloaded) as a supervisord program, an NVML-only monitor that must survive, and
# `kimitui campaign FILE --headless` with the campaign file's defaults for the request fields (so the run
# finds for itself that the server rejects vLLM's ignore_eos): macro against the server, the transition
# (supervisorctl stop, verify on the real GPU), micro on the freed GPU, the analysis, the service restarted
# through supervisorctl, the post-restart check. Then `kimitui report RUN`.
# Needs supervisor and transformers serve's own packages (fastapi, uvicorn, pydantic, openai: carried as
# wheels) and python3 with torch, transformers and pynvml. Writes under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/kimitui-device-tf-campaign}
W=$(mktemp -d /tmp/ktf-XXXXXX)
mkdir -p "$OUT" "$W/bin"
PY=${PYTHON:-python3}
PORT=8011
TF_DEVICE=${TF_DEVICE:-cuda:0}  # cpu, with KIMITUI_HOST=demo, to try the script on a machine with no GPU
HOST=${KIMITUI_HOST:-local}
. scripts/device_supervisor.sh
supervisor_shim "$W" "$PY"
export PATH="$W/bin:$PATH" XDG_DATA_HOME="$OUT/data" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
$PY scripts/make_tiny_model.py "$W/model" > "$OUT/model.txt" 2>&1 || { cat "$OUT/model.txt"; exit 1; }
tfserve_conf "$W" "$PY" "$W/model" "$PORT" "$TF_DEVICE"
$PY -m supervisor.supervisord -c "$W/supervisord.conf"
$PY -c 'import time, pynvml
pynvml.nvmlInit(); hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
while True:
    [pynvml.nvmlDeviceGetMemoryInfo(h) for h in hs]; time.sleep(0.2)' > "$W/monitor.out" 2>&1 &
MON=$!
began=$(date +%s%3N)
$PY - "$PORT" "$W/supervisord.conf" <<'PYEOF'
import subprocess, sys, time, urllib.request
deadline = time.monotonic() + 150
while time.monotonic() < deadline:
    try:
        urllib.request.urlopen("http://127.0.0.1:%s/health" % sys.argv[1], timeout=2).read()
        break
    except Exception:
        state = subprocess.run(["supervisorctl", "-c", sys.argv[2], "status", "tfserve"], capture_output=True,
                               text=True).stdout
        if "EXITED" in state or "FATAL" in state:
            break  # the server died while loading: its log says why
        time.sleep(0.2)
PYEOF
cp "$W/tfserve.log" "$OUT/tfserve-start.log" 2>/dev/null
echo "service: $(supervisorctl -c "$W/supervisord.conf" status tfserve), healthy after $(( $(date +%s%3N) - began )) ms" | tee "$OUT/campaign.txt"
# warm the GPU path once (the first CUDA request compiles kernels) so the sweep measures the server, not that
$PY - "$PORT" "$W/model" <<'PYEOF' | tee -a "$OUT/campaign.txt"
import json, sys, time, urllib.request
body = json.dumps({"model": sys.argv[2], "prompt": "hello", "max_tokens": 4, "stream": False}).encode()
began = time.monotonic()
request = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % sys.argv[1], data=body,
                                 headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(request, timeout=120).read()
    print("warm-up completion: %.2f s" % (time.monotonic() - began))
except Exception as error:
    print("warm-up completion failed: %s" % error)
PYEOF
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | tee -a "$OUT/campaign.txt"
cat > "$OUT/campaign.toml" <<TOML
[campaign]
name = "kimitui on one H200 against transformers serve (a tiny random Llama on the GPU)"
host = "$HOST"
sample_interval_s = 0.25
[service]
spec = "supervisor:tfserve@$W/supervisord.conf"
api_url = "http://127.0.0.1:$PORT"
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
# transformers 5.17 pinned to a folder answers GET /v1/models with 500 when ~/.cache/huggingface/hub is
# missing (it scans that cache for the list): the model is named here, as an operator would
model = "$W/model"
concurrency = [1, 2, 4]
requests = "2x"
max_tokens = 32
input_len = 64
[cleanup]
drain_s = 30
graceful_s = 20
term_grace_s = 3
[micro]
parts = ["gemm", "allreduce"]
tp = 8
[restart]
health_s = 180
[check]
requests = 3
margin_pct = 90
ttft_margin_pct = 1000
TOML
timeout 500 $PY -m kimitui campaign "$OUT/campaign.toml" --headless > "$OUT/campaign.out" 2> "$OUT/campaign.err"
echo "campaign exit status $?" | tee -a "$OUT/campaign.txt"
grep -iE "dropp|ignore_eos|warning" "$OUT/campaign.err" | head -5 >> "$OUT/campaign.txt"
tail -25 "$OUT/campaign.err" >> "$OUT/campaign.txt"
RUN=$(ls -t "$XDG_DATA_HOME"/kimitui/runs/*.jsonl 2>/dev/null | head -1)
if [ -n "$RUN" ]; then
  $PY -m kimitui report "$RUN" > "$OUT/campaign-report.md" 2>&1
  $PY -m kimitui replay --summary "$RUN" >> "$OUT/campaign.txt" 2>&1
  gzip -c "$RUN" > "$OUT/h200-tf-campaign.jsonl.gz"
fi
echo "monitor pid $MON alive after the campaign: $(kill -0 $MON 2>/dev/null && echo yes || echo NO)" | tee -a "$OUT/campaign.txt"
echo "service after the campaign: $(supervisorctl -c "$W/supervisord.conf" status tfserve)" | tee -a "$OUT/campaign.txt"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | tee -a "$OUT/campaign.txt"
cp "$W/tfserve.log" "$OUT/tfserve.log" 2>/dev/null
PGID=$(supervisorctl -c "$W/supervisord.conf" pid tfserve 2>/dev/null)
supervisorctl -c "$W/supervisord.conf" stop tfserve >/dev/null 2>&1
case "$PGID" in ''|*[!0-9]*|0) ;; *) kill -KILL -- "-$PGID" 2>/dev/null ;; esac
supervisorctl -c "$W/supervisord.conf" shutdown >/dev/null 2>&1
kill $MON 2>/dev/null
rm -rf "$OUT/data"
