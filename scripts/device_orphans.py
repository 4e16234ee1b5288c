"""Memory whose owner died, on a real GPU (issue 32): a torch process holding ~6 GiB on cuda:0 forks two workers
(they inherit its /dev/nvidia* descriptors, as DataLoader workers do) and is SIGKILLed. The driver keeps the
memory under the dead pid while the workers live. Recorded: what nvidia-smi shows, what the agent's samples say
(kind exited, held_by the workers; the workers' inherits), the cleanup's preview with --service none, then the
cleanup freeing it (--yes others,device) and the memory nvidia-smi shows after.

    python3 scripts/device_orphans.py --out DIR      (run from the repository root, kimitui importable)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HOLDER = r"""
import os, sys, time, torch
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    kids.append(pid)
print("ready", *kids, flush=True)
time.sleep(600)
"""


def smi_apps() -> str:
    res = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return " | ".join(line.strip() for line in (res.stdout + res.stderr).splitlines() if line.strip()) or "(none)"


def smi_used() -> str:
    res = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader", "-i", "0"],
                         capture_output=True, text=True)
    return res.stdout.strip()


def device_fds(pid: int) -> list[str]:
    out = []
    try:
        for n in os.listdir(f"/proc/{pid}/fd"):
            try:
                t = os.readlink(f"/proc/{pid}/fd/{n}")
            except OSError:
                continue
            if t.startswith("/dev/nvidia"):
                out.append(t)
    except OSError:
        pass
    return sorted(out)


def mapped_devices(pid: int) -> int:
    try:
        return sum(1 for line in open(f"/proc/{pid}/maps") if "/dev/nvidia" in line)
    except OSError:
        return -1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gib", type=float, default=6.0)
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    ns = os.stat("/proc/self/ns/pid").st_ino
    say(f"pid namespace inode {ns} ({'the initial one' if ns == 0xEFFFFFFC else 'not the initial one'})")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(args.gib)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert holder.stdout is not None
    ready = holder.stdout.readline().split()
    if not ready or ready[0] != "ready":
        say(f"FAIL: the holder did not start ({ready})")
        return 1
    kids = [int(k) for k in ready[1:]]
    say(f"holder {holder.pid} (setsid), workers {kids}")
    for k in kids:
        say(f"worker {k}: device fds {device_fds(k)}; device mappings {mapped_devices(k)}")
    say(f"before the kill: nvidia-smi apps {smi_apps()}; GPU 0 used {smi_used()}")
    env = dict(os.environ, XDG_DATA_HOME=str(out / "data"))
    agent = subprocess.Popen([sys.executable, "-m", "kimitui.hostside.agent", "--sample", "--count", "16",
                              "--interval", "0.5", "--scan-interval", "0.5"], stdout=subprocess.PIPE,
                             stdin=subprocess.PIPE, text=True, env=env)
    assert agent.stdout is not None
    samples = []
    for line in agent.stdout:
        if '"type":"sample"' not in line.replace(" ", ""):
            continue
        samples.append(json.loads(line[line.index("{"):]))
        if len(samples) == 3:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
            say(f"holder {holder.pid} SIGKILLed and reaped after sample 3")
    agent.wait()
    (out / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    last = {p["pid"]: p for p in samples[-1]["procs"]}
    dead = last.get(holder.pid)
    say(f"after the kill: nvidia-smi apps {smi_apps()}; GPU 0 used {smi_used()}")
    if dead is None:
        say(f"the driver no longer lists {holder.pid}: {sorted(last)}")
    else:
        say(f"agent: pid {holder.pid} kind {dead['kind']}, {dead['gpu_mem_mib']} MiB, held_by {dead.get('held_by')}, "
            f"flags {dead['flags']}")
    for k in kids:
        p = last.get(k)
        say(f"agent: worker {k}: " + ("not listed" if p is None else
                                      f"kind {p['kind']}, inherits {p.get('inherits')}, flags {p['flags']}"))
    ok = dead is not None and dead["kind"] == "exited" and sorted(dead.get("held_by") or []) == sorted(kids)
    dry = subprocess.run([sys.executable, "-m", "kimitui", "cleanup", "--host", "local", "--service", "none",
                          "--gpus", "0", "--dry-run"], capture_output=True, text=True, env=env, timeout=120)
    (out / "dry-run.txt").write_text(dry.stdout + dry.stderr)
    said = [line.strip() for line in (dry.stdout + dry.stderr).splitlines()
            if "exited" in line or "inherited" in line]
    for line in said:
        say(f"preview: {line[:220]}")
    ok = ok and any(f"of exited pid {holder.pid} through inherited descriptors" in line for line in said)
    ok = ok and not any("not visible here" in line for line in said)
    run = subprocess.run([sys.executable, "-m", "kimitui", "cleanup", "--host", "local", "--service", "none",
                          "--gpus", "0", "--yes", "others,device"], capture_output=True, text=True, env=env,
                         timeout=180)
    (out / "cleanup.txt").write_text(run.stdout + run.stderr)
    verdict = [line for line in (run.stdout + run.stderr).splitlines() if "GPUs" in line and "CLEAN" in line]
    say(f"cleanup --yes others,device: rc {run.returncode}; {verdict[-1] if verdict else '(no verdict)'}")
    time.sleep(1.0)
    say(f"after the cleanup: nvidia-smi apps {smi_apps()}; GPU 0 used {smi_used()}")
    alive = [k for k in kids if os.path.exists(f"/proc/{k}")]
    ok = ok and run.returncode == 0 and not alive
    for k in alive:
        os.kill(k, signal.SIGKILL)
    say(f"{'PASS' if ok else 'FAIL'}: the dead owner's memory shown held by its workers and freed with them")
    (out / "orphans.txt").write_text("\n".join(lines) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
