"""The code that runs on a GPU host, under that host's own python3 (3.8 and newer): stdlib, plus pynvml and
torch where present; nothing of kimitui is installed there.

Every module imports only the stdlib (pynvml, torch and vLLM inside functions, where present) and its
siblings, by relative imports: the caller sends the modules a program needs as one payload
(kimitui/hosts/bundle.py), and ``bootstrap`` loads them from memory on the host (no file written there).
Locally the same modules are ``kimitui.hostside.*``: the simulator, the cleanup and the TUI use the /proc
reader (``procfs``) and the guarded signal (``signals``) from here, so /proc/PID/stat is parsed once.

  procfs      /proc/PID/stat, status, cmdline, cgroup, exe; the process table
  signals     the guarded signal (pidfd, then the start-time check) and killpg
  holders     who holds the device files (fd links, maps) and the per-process details of a sample
  gpu         the GpuSample shape and NoDriver; nvml, smi, simdriver: the three GPU sources
  simholder   what a process does to hold memory on the simulated driver
  sources     the source a request names (NVML, else nvidia-smi, else the simulated driver)
  sampler     the sample and the sample stream
  topology    the interconnect (NVML, nvidia-smi -q -x, or modelled)
  wire        one JSON line a write, the token tag, the agent's log lines, the workers' events
  agent/      the server: requests on stdin, replies, samples and worker lines on stdout
  gemm, gemm_torch, gemm_moe, gemm_weights, allreduce   the micro-benchmark workers (sent with worker_start)
  bootstrap   the in-memory importer the payload starts with
"""
