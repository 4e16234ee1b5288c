#!/usr/bin/env bash
# The agent's clock caps and PCIe link on a real GPU: NVML and nvidia-smi captures (scripts/device_link_capture.py),
# then `kimitui watch --host local --json` under a GEMM load and the nvidia-smi source alone. OUT=DIR bash scripts/device_caps_link.sh
cd "$(dirname "$0")/.." && mkdir -p "$OUT/link"
rm -rf /tmp/kimitui-site; python3 -m pip install -q --no-index --no-deps --target /tmp/kimitui-site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/kimitui-site
python3 scripts/device_link_capture.py $OUT/link > /dev/null 2> $OUT/link/err.txt
for f in $OUT/link/smi-*.csv; do echo "== $f"; cat $f; done
python3 -c "
import json;d=json.load(open('$OUT/link/nvml-link.json'));print(d['driver'],d['name']);[print(k,r) for k in ('idle','busy') for r in d[k]]"
python3 -c 'import time, torch; a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); end = time.time() + 12
while time.time() < end: a @ a' &
sleep 4; timeout 30 python3 -m kimitui watch --host local --json --count 3 --interval 1 > $OUT/watch.jsonl 2> $OUT/watch.err
timeout 30 python3 -m kimitui watch --host local --json --count 1 > $OUT/watch-smi.jsonl 2>&1 || true
python3 -c "
import json
for line in open('$OUT/watch.jsonl'):
    d = json.loads(line)
    for g in d.get('gpus', []): print('watch', g.get('index'), g.get('util_pct'), g.get('throttle'), g.get('pcie'), g.get('sm_clock_mhz'))
"
wait
python3 -c "
import json,sys
sys.path.insert(0,'.')
from kimitui.hostside.smi import SmiSource
s=SmiSource(); print('smi fields', s.gpu_fields[-6:]); g,_=s.sample(); print('smi', [(x['throttle'], x['pcie']) for x in g])
"
python3 -c "
import sys
sys.path.insert(0,'.')
from kimitui.hostside.nvml import NvmlSource
s=NvmlSource(); g,_=s.sample(); g2,_=s.sample()
print('nvml xid events registered:', s.events is not None, 'gpus', sorted(s.xid), 'xid', [x['xid'] for x in g2])
"
