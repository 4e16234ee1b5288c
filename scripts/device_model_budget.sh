#!/usr/bin/env bash
# Issue 35 item 4: the analysis closes for real-family models (from the repository root; run by
# scripts/device_run.sh, part `budget`). For each family (scripts/make_random_model.py: random weights of
# Meta-Llama-3-8B's shapes, and Qwen3-30B-A3B's shapes on fewer layers), `transformers serve` serves it on the GPU
# (a supervisord program), and `kimitui campaign --headless` runs Phase 1 against it, the transition, Phase 2
# (the GEMMs at the model's own shapes: the campaign file names no model, it is found from the server and read
# on the host) and Phase 3; then scripts/linear_timing.py times the model's own linears in torch at each macro
# level, and the budget's GEMM ms is set beside it (the target: within 15 %, and no level IMPOSSIBLE).
# Needs what scripts/device_tf_campaign.sh needs. FAMILIES="llama-3-8b qwen3-moe" by default; LAYERS_qwen3_moe
# sets that family's layers (default 12). TF_DEVICE=cpu KIMITUI_HOST=demo LAYERS=1 tries it on a machine with no
# GPU. Writes under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/kimitui-device-model-budget}
PY=${PYTHON:-python3}
PORT=8012
TF_DEVICE=${TF_DEVICE:-cuda:0}
HOST=${KIMITUI_HOST:-local}
FAMILIES=${FAMILIES:-"llama-3-8b qwen3-moe"}
LEVELS=${LEVELS:-"1, 2, 4"}
OTHERS=no; [ "$HOST" = demo ] && OTHERS=yes
mkdir -p "$OUT"
. scripts/device_supervisor.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
for FAMILY in $FAMILIES; do
  W=$(mktemp -d /tmp/kbudget-XXXXXX)
  D="$OUT/$FAMILY"; mkdir -p "$D" "$W/bin"
  supervisor_shim "$W" "$PY"
  export PATH="$W/bin:$PATH"  # supervisorctl for the campaign (its service manager) and for the shutdown
  layers_var="LAYERS_${FAMILY//-/_}"
  layers=${LAYERS:-${!layers_var:-}}
  [ "$FAMILY" = qwen3-moe ] && layers=${layers:-12}
  began=$(date +%s)
  $PY scripts/make_random_model.py "$W/$FAMILY" --family "$FAMILY" ${layers:+--layers $layers} \
    --device "${TF_DEVICE%%:*}" > "$D/model.json" 2> "$D/model.err" || { tail -5 "$D/model.err"; continue; }
  echo "$FAMILY: $(cat "$D/model.json") in $(( $(date +%s) - began )) s" | tee -a "$OUT/budget.txt"
  tfserve_conf "$W" "$PY" "$W/$FAMILY" "$PORT" "$TF_DEVICE"
  $PY -m supervisor.supervisord -c "$W/supervisord.conf"
  $PY - "$PORT" "$W/$FAMILY" <<'PYEOF' | tee -a "$OUT/budget.txt"
import json, sys, time, urllib.request
deadline = time.monotonic() + 240
began = time.monotonic()
while time.monotonic() < deadline:
    try:
        urllib.request.urlopen("http://127.0.0.1:%s/health" % sys.argv[1], timeout=2).read()
        break
    except Exception:
        time.sleep(0.5)
else:
    sys.exit(print("  the server did not answer /health in 240 s"))
body = json.dumps({"model": sys.argv[2], "prompt": "hello", "max_tokens": 4, "stream": False}).encode()
request = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % sys.argv[1], data=body,
                                 headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(request, timeout=300).read()
    print("  healthy and warmed up in %.1f s" % (time.monotonic() - began))
except Exception as error:
    print("  warm-up failed: %s" % error)
PYEOF
  if ! curl -sf -m 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
    echo "  transformers serve is not up; the end of its log:" | tee -a "$OUT/budget.txt"
    tail -15 "$W/tfserve.log" 2>/dev/null | sed 's/^/    /' | tee -a "$OUT/budget.txt"
  fi
  cat > "$D/campaign.toml" <<TOML
[campaign]
name = "the budget of $FAMILY (random weights) on one GPU against transformers serve"
host = "$HOST"
phases = ["macro", "cleanup", "micro", "analysis"]
sample_interval_s = 0.25
[service]
spec = "supervisor:tfserve@$W/supervisord.conf"
api_url = "http://127.0.0.1:$PORT"
[consent]
drain = "yes"
graceful = "yes"
process = "yes"
others = "$OTHERS"  # yes on the demo (its own simulated vLLM holds its GPUs), else no
device = "yes"
reset = "no"
restart = "no"
abort_restart = "no"
[macro]
model = "$W/$FAMILY"  # the requests' model field (transformers serve pinned to a folder): no [model] section
concurrency = [$LEVELS]
requests = "4x"
max_tokens = 32
input_len = 64
warmup = 2
[cleanup]
drain_s = 60
graceful_s = 20
term_grace_s = 3
[micro]
parts = ["gemm"]
[model]
tp = 1
TOML
  XDG_DATA_HOME="$D/data" timeout 420 $PY -m kimitui campaign "$D/campaign.toml" --headless \
    > "$D/campaign.out" 2> "$D/campaign.err"
  echo "  campaign exit status $?; $(grep -m1 'model measured' "$D/campaign.err")" | tee -a "$OUT/budget.txt"
  supervisorctl -c "$W/supervisord.conf" shutdown > /dev/null 2>&1
  RUN=$(ls -t "$D"/data/kimitui/runs/*.jsonl 2>/dev/null | head -1)
  timeout 300 $PY scripts/linear_timing.py "$W/$FAMILY" --ms "${LEVELS// /}" --device "$TF_DEVICE" \
    > "$D/linears.json" 2> "$D/linears.err" || tail -3 "$D/linears.err"
  if [ "$FAMILY" = qwen3-moe ]; then  # the MoE row's kernel against the loop and transformers' own block
    timeout 300 $PY scripts/linear_timing.py "$W/$FAMILY" --ms "${LEVELS// /}" --device "$TF_DEVICE" --whole-moe \
      > "$D/linears-whole-moe.json" 2>> "$D/linears.err" || tail -3 "$D/linears.err"
    timeout 200 $PY scripts/device_moe_kernels.py "$W/$FAMILY" > "$D/moe-kernels.json" 2> "$D/moe-kernels.err" \
      && echo "  moe kernels: $(cat "$D/moe-kernels.json")" | tee -a "$OUT/budget.txt" || tail -3 "$D/moe-kernels.err"
  fi
  if [ -n "$RUN" ]; then
    $PY -m kimitui report "$RUN" > "$D/report.md" 2>&1
    gzip -c "$RUN" > "$D/run.jsonl.gz"
    $PY - "$RUN" "$D/linears.json" "$D/linears-whole-moe.json" <<'PYEOF' | tee -a "$OUT/budget.txt"
import json, sys
from kimitui.core.runfile import RunReader
from kimitui.core.state import fold_all
state = fold_all(list(RunReader(sys.argv[1]).events()))
budget, served = state.budget, state.served_model
print("  model: %s" % (served.name if served else "none recorded"))
if budget is None:
    sys.exit(print("  no budget"))
def plain(path):
    try:
        return json.load(open(path))["ms"]
    except (OSError, ValueError, KeyError):
        return {}
linears, whole = plain(sys.argv[2]), plain(sys.argv[3])
for r in budget.rows:
    p, w = linears.get(str(r.m)), whole.get(str(r.m))
    gemm = r.gemm_ms
    agree = "" if p is None or gemm is None else "  plain torch %.3f ms: %+.1f %%" % (p, (gemm - p) / p * 100)
    if w is not None and gemm is not None:
        agree += " (MoE blocks whole, routing included: %.3f ms: %+.1f %%)" % (w, (gemm - w) / w * 100)
    print("  M=%d TPOT %s ms, GEMMs %s ms, rest %s ms%s" % (r.m, r.tpot_ms, gemm, r.rest_ms, agree))
print("  verdict: %s" % budget.verdict[:300])
from kimitui.bench.sweep_output import energy_words
for sweep in state.sweeps:
    for c, point in sorted(sweep.points.items()):
        print("  energy c=%d: %s" % (c, energy_words(point.result, sweep.energy.get(c))))
PYEOF
  fi
  cp "$W/tfserve.log" "$D/tfserve.log" 2>/dev/null
  rm -rf "$W" "$D/data"
done
