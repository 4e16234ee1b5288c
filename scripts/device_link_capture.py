"""Captures for the agent's clock caps and PCIe link (fleet over SSH): NVML's clock event reasons and the link's
generation and width (now and at most) of GPU 0, idle and under a GEMM load, and nvidia-smi's CSV of the same
fields (each name variant it accepts or refuses, as it says). Writes OUT/nvml-link.json and OUT/smi-*.csv.

    python3 scripts/device_link_capture.py OUT
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

FIELDS = ("index,clocks_event_reasons.active,clocks_throttle_reasons.active,pcie.link.gen.current,"
          "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,utilization.gpu")


def smi(out: Path, tag: str) -> None:
    for fmt in ("csv,noheader,nounits", "csv"):
        for fields in (FIELDS, FIELDS.replace("clocks_throttle_reasons.active,", ""),
                       FIELDS.replace("clocks_event_reasons.active,", ""), "index,pcie.link.gen.gpucurrent,"
                       "pcie.link.gen.gpumax,pcie.link.gen.hostmax"):
            r = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", f"--format={fmt}"], capture_output=True,
                               text=True)
            name = f"smi-{tag}-{'nounits' if 'nounits' in fmt else 'units'}-{len(fields.split(','))}.csv"
            (out / name).write_text(f"# --query-gpu={fields} --format={fmt} -> exit {r.returncode}\n"
                                    + r.stdout + r.stderr)


def nvml_read(nv, h) -> dict:  # type: ignore[no-untyped-def]
    out = {}
    for key, fn in (("reasons", getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                     or nv.nvmlDeviceGetCurrentClocksThrottleReasons),
                    ("gen", nv.nvmlDeviceGetCurrPcieLinkGeneration), ("width", nv.nvmlDeviceGetCurrPcieLinkWidth),
                    ("max_gen", nv.nvmlDeviceGetMaxPcieLinkGeneration), ("max_width", nv.nvmlDeviceGetMaxPcieLinkWidth),
                    ("gpu_max_gen", getattr(nv, "nvmlDeviceGetGpuMaxPcieLinkGeneration", None)),
                    ("util", lambda h: nv.nvmlDeviceGetUtilizationRates(h).gpu),
                    ("power_mw", nv.nvmlDeviceGetPowerUsage), ("sm_clock", lambda h: nv.nvmlDeviceGetClockInfo(
                        h, nv.NVML_CLOCK_SM))):
        try:
            out[key] = fn(h) if fn else None
        except Exception as exc:
            out[key] = f"{type(exc).__name__}: {exc}"
    return out


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    import pynvml as nv
    import torch

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    record = {"driver": nv.nvmlSystemGetDriverVersion(), "name": nv.nvmlDeviceGetName(h), "idle": [], "busy": []}
    for _ in range(3):
        record["idle"].append(nvml_read(nv, h))
        time.sleep(0.2)
    smi(out, "idle")
    stop = threading.Event()

    def load() -> None:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()

    t = threading.Thread(target=load)
    t.start()
    time.sleep(2.0)
    for _ in range(5):
        record["busy"].append(nvml_read(nv, h))
        time.sleep(0.3)
    smi(out, "busy")
    stop.set()
    t.join()
    (out / "nvml-link.json").write_text(json.dumps(record, indent=1, default=str))
    print(json.dumps(record, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
