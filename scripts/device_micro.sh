#!/usr/bin/env bash
# The micro benchmarks on one bare H200 (issue #11, item 8): python3 with torch and pynvml there, none of
# kimitui's own dependencies needed (the micro path is stdlib + torch). Run from the repository root:
#
#     OUT=/some/dir bash scripts/device_micro.sh          # on the device tool: $OUT is set
#
# Writes under $OUT (8 files, the device tool's limit):
#   env.txt            torch, GPU, driver, nvidia-smi topo -m
#   micro.txt          `kimitui bench micro --host local --gemm`: topology, backends, copy bandwidth, GEMM table
#   micro.log          its stderr (recording path, warnings)
#   micro-report.md    `kimitui report` of the recorded run (the GEMM and all-reduce sections)
#   h200-micro.jsonl.gz  the recorded run, for sample_runs/ (replay: kimitui replay FILE)
#   fidelity.txt/.json benchmarks/micro_fidelity.py: worker figures vs a plain CUDA-event loop (target 5%)
#   cancel.txt         a GEMM run cancelled mid-way (SIGINT): exit status, and the GPU's processes after it
# Finishes in about 5 minutes (each step has its own time limit; the whole stays under 9 minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kimitui-device-micro}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export XDG_DATA_HOME="$OUT/.data" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
PY=${PYTHON:-python3}
status=0

{
  echo "# $(date -u +%FT%TZ) $(hostname)"
  $PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(0))'
  $PY -c 'import vllm; print("vllm", vllm.__version__)' 2>&1 | tail -1
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
  nvidia-smi topo -m
} > "$OUT/env.txt" 2>&1

# 1. The GEMM benchmark and the one-GPU parts (telemetry, GPU-memory check, topology, copy bandwidth) through
#    the CLI, recorded. An all-reduce needs 2 GPUs: on one it is reported as skipped.
timeout -s INT 300 $PY -m kimitui bench micro --host local --gemm --allreduce > "$OUT/micro.txt" 2> "$OUT/micro.log"
rc=$?; echo "exit status $rc" >> "$OUT/micro.log"; [ $rc -eq 0 ] || status=1
run=$(ls -t "$XDG_DATA_HOME"/kimitui/runs/*.jsonl 2>/dev/null | head -1)
if [ -n "$run" ]; then
  $PY -m kimitui report "$run" > "$OUT/micro-report.md" 2>&1
  gzip -c "$run" > "$OUT/h200-micro.jsonl.gz"
fi

# 2. Fidelity: the worker's torch-int4 and bf16 figures against a plain CUDA-event loop.
timeout -s INT 170 $PY benchmarks/micro_fidelity.py --ms 1,16,128 --json "$OUT/fidelity.json" > "$OUT/fidelity.txt" 2>&1
rc=$?; echo "exit status $rc" >> "$OUT/fidelity.txt"; [ $rc -eq 0 ] || status=1

# 3. Cancel: start a GEMM run, SIGINT it once its first row is out, then look at the GPU's processes.
{
  timeout -k 20 150 $PY -m kimitui bench micro --host local --gemm --json > "$OUT/.cancel.jsonl" \
    2> "$OUT/.cancel.err" &
  pid=$!
  for _ in $(seq 1 600); do grep -q '"gemm_row"' "$OUT/.cancel.jsonl" 2>/dev/null && break; sleep 0.1; done
  echo "first row after $(grep -c '' "$OUT/.cancel.jsonl") lines; SIGINT to pid $pid"
  kill -INT "$pid"
  wait "$pid"; echo "bench micro exit status $? (130: cancelled)"
  tail -3 "$OUT/.cancel.err"
  grep '"micro_end"' "$OUT/.cancel.jsonl"
  echo "compute processes on the GPU after the cancel (none expected):"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
  nvidia-smi --query-gpu=memory.used --format=csv
} > "$OUT/cancel.txt" 2>&1
rm -f "$OUT/.cancel.jsonl" "$OUT/.cancel.err"
rm -rf "$XDG_DATA_HOME"
echo "device_micro: done (status $status); outputs in $OUT"
exit $status
