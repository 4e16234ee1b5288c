"""kimitui's host agent: the one program that runs on a GPU host, on the host's own python3 (3.8 and newer).

Sent as one payload with the hostside modules it imports (kimitui/hosts/bundle.py) and loaded from memory
there (hostside/bootstrap.py); started by kimitui/hosts/launch.py. The server is agent/server.py; the
/proc, signal and GPU code it answers with are its sibling modules.

One channel: requests come in on stdin, everything goes out on stdout, one JSON object a line, ``k`` (the
token the caller sent with the source: only lines that start with it are the agent's), ``t`` and ``type``
first. The agent exits when its stdin closes (the caller is gone), ending its workers first.

Out (stdout):
  hello        {agent_pid, start_time, protocol, python, executable, host, user, uid, ancestors}   once, first;
               ancestors: [[pid, start time, ppid, comm], ...] from the parent up to (not including) PID 1
  fatal        {message}                    only from BOOTSTRAP: this python is too old (exit 5)
  reply        {id, ok: true, result} or {id, ok: false, error, kind}          one per request, any order
  sample       {host, seq, gpus, procs, agent_pid, source}       while a sample stream runs (HostSample shape)
  log          {level, source, message}     a warning of the agent's (LogLine shape)
  worker_line  {worker, data} (a JSON line of the worker's stdout) or {worker, text} (any other line)
  worker_exit  {worker, returncode, cancelled, stderr_tail}   after the worker's last line

In (stdin): {"id": N, "op": OP, ...fields}. Error kinds: bad_request, not_found, permission, timeout,
nodriver, not_regular, too_large, error. Ops (a request is answered once and never repeated by the caller;
each runs on a thread of the pool as it comes, so a slow one never delays another; probe, sample and
sample_stop run one after another in the order they came):
  ping           -                                       -> {agent_pid}
  probe          SOURCE                                  -> {source, driver, gpus} (nodriver: the reasons)
  sample         SOURCE, interval, scan_interval, count  -> as probe; samples follow until sample_stop
  sample_stop    -                                       -> {stopped}
  scan           -                      -> {self_pid, uid, user, ancestors, procs: [{pid, ppid, state,
                                            start, uid, user, cmdline, exe, pgrp, sid, tty, tpgid, nspid,
                                            leader_exited, takes?}]}; takes: [{pid, start, why, via,
                                            ignores}], what the kernel ends with it (hostside/fate.py)
  stat           pids                   -> {procs: {"PID": [start time, state]}} (gone pids left out)
  read_file      path, max_bytes        -> {data (base64), size}; a regular file only (kind not_regular:
                                           a FIFO, device or directory, refused without waiting on it);
                                           kind too_large past max_bytes
  model_config   names, pids            -> {found: {name, path, where, data (base64)} or null, tried: [[path,
                                           why], ...]}: the served model's config.json (hostside/model_config.py)
  signal         pid, start_time, sig, companions  -> {outcome: sent|gone|mismatch|refused|error, detail};
                                           refused for PID 1, kernel threads, the agent and its ancestors,
                                           and, looked at right before the signal, a host daemon (by exe or
                                           unit) or one that would take with it (fate.py) a process not in
                                           companions ([[pid, start time], ...]); "sent" with detail
                                           "ignored: ..." when the kernel drops it
  run            argv, timeout, stdin (base64), env, cwd   -> {rc, stdout, stderr}; in its own process
                                           group, killed on timeout (kind timeout); not_found if no such command
  spawn          argv, log, env, cwd    -> {pid, start_time}: detached (own session), output to log
  http_get       url, timeout           -> {status (int or null), error}
  worker_start   source, args, env, python, cwd  -> {worker, pid, python}; the worker id is the request id
  worker_cancel  worker, grace          -> {signalled}: SIGTERM to its group, SIGKILL after grace
SOURCE fields: sim_dir, dev_prefix, proc_root, nvidia_smi, no_nvml (NVML, else nvidia-smi --query-* CSV,
else the simulated driver of --sim-dir DIR: gpus.json, holders/<pid>.json, load.json, leaked.json). Every
GPU process is enriched from /proc, and /proc/*/fd + /proc/*/maps are scanned for the device files:
mapped = CUDA context ("cuda"), open but not mapped = "handle", either in a process in exit (PF_EXITING) =
"exiting". A pid the driver lists that has exited while processes it forked keep its device files open (the
driver keeps the memory) = "exited", with held_by (those processes; each lists it in inherits).

Python 3.8 compatible (tests run it under 3.8 and the newest python on the machine; vermin and ruff's
per-file target check every hostside module): no zip(strict=), no os.pidfd_open or signal.pidfd_send_signal
without the syscall fallback.
"""
