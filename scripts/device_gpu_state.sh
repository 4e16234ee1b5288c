#!/usr/bin/env bash
# The dashboard's GPU rows (XID, clock caps, a busy link below its maximum) on a real driver: `kimitui record
# --host local` under a GEMM load, then scripts/device_gpu_state.py. OUT=DIR bash scripts/device_gpu_state.sh
cd "$(dirname "$0")/.." && mkdir -p "$OUT/state"
rm -rf /tmp/kimitui-site; python3 -m pip install -q --no-index --no-deps --target /tmp/kimitui-site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/kimitui-site XDG_DATA_HOME=$OUT/state/data
python3 -c 'import time, torch; a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); end = time.time() + 14
while time.time() < end: a @ a' &
load=$!
timeout -s INT 20 python3 -m kimitui record --host local -o $OUT/state/local.jsonl.gz --interval 0.5 \
  > $OUT/state/record.out 2> $OUT/state/record.err
echo "gpu-state: record rc $? (SIGINT after 20 s: 14 s loaded, then idle)"
wait $load
python3 scripts/device_gpu_state.py $OUT/state/local.jsonl.gz $OUT/state 2>&1 | tail -40
