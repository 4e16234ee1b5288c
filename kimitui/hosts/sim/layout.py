"""The simulated host's directory: GPU list, device files, holder records, service run files.

This layout is the contract with the agent's simulated NVML source (kimitui/hostside/simdriver.py):

- ``DIR/gpus.json``: ``{"driver": "sim-580", "gpus": [{"index", "uuid", "name", "total_mib",
  "reserved_mib", "pci", "pcie_best"}, ...]}`` (``pcie_best``: [generation, width] a slot trains to below the
  link's maximum, or null)
- ``DIR/xid.json`` (optional): ``{"<gpu index>": code}``, the last XID each GPU reported (``GpuFaults``)
- ``DIR/dev/nvidia0..N-1``, ``DIR/dev/nvidiactl``, ``DIR/dev/nvidia-uvm``: regular files of one page, so
  holders can open and mmap them the way a CUDA context maps the real device nodes.
- ``DIR/holders/<pid>.json``: ``{"pid", "start_time", "mem_mib": {"<gpu index>": MiB}}`` written by the
  holder itself (atomically). Memory counts only while that pid is alive with that start time.
- ``DIR/load.json``: ``{"util": 0..100}``, written by the API server as its batch changes.
- ``DIR/leaked.json`` (optional): ``{"<gpu index>": MiB}``, memory the driver counts used with no process
  holding it (what a crashed context can leave behind until a GPU reset); absent unless a test writes it.
- ``DIR/run/``: the service's pidfile (``vllm.pid``), API port (``api.port``) and log (``vllm.log``).

No module here starts processes; this file only names paths and writes the static parts.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
DEFAULT_TOTAL_MIB = 97_887
DEFAULT_RESERVED_MIB = 616
DEFAULT_DRIVER = "sim-580"
DEV_FILE_BYTES = 4096
PREFIX = "kimitui-sim-"
OWNER_FILE = "owner.json"
"""In each sim directory: the pid and start time (clock ticks after boot) of the process that made it."""
_UUID_NAMESPACE = uuid.UUID("6b1d3c7e-5f0a-4c55-9a43-6b696d697475")  # fixed: uuids are stable across runs


@dataclass(frozen=True, slots=True)
class SimGpu:
    index: int
    uuid: str
    name: str
    total_mib: int
    reserved_mib: int
    pci: str
    pcie_best: list[int] | None = None


LINK_WIDTHS = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True, slots=True)
class GpuFaults:
    """What the simulated driver reports wrong with some GPUs from the start (``kimitui demo --xid 6:79 --pcie
    7:4x16``, as the fleet demo's troubled host has): each one's last XID, and a slot that trains below the link's
    maximum (a busy GPU's link runs there; an idle one's trains down to Gen1 either way)."""

    xid: dict[int, int] = field(default_factory=dict)
    pcie_best: dict[int, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, xids: list[str], links: list[str], gpus: int) -> GpuFaults:
        """From ``GPU:CODE`` and ``GPU:GENxWIDTH`` words; a ValueError of one line names the bad one."""
        out = cls()
        for word in xids:
            gpu, _, code = word.partition(":")
            if not (_index(gpu, gpus) is not None and code.isdigit() and 0 < int(code) < 1 << 31):
                raise ValueError(f"--xid {word!r}: GPU:CODE, a GPU from 0 to {gpus - 1} and a positive XID (6:79)")
            out.xid[int(gpu)] = int(code)
        for word in links:
            gpu, _, link = word.partition(":")
            gen, _, width = link.lower().removeprefix("gen").partition("x")
            if not (_index(gpu, gpus) is not None and gen.isdigit() and 1 <= int(gen) <= 6 and width.isdigit()
                    and int(width) in LINK_WIDTHS):
                raise ValueError(f"--pcie {word!r}: GPU:GENxWIDTH, a GPU from 0 to {gpus - 1}, a generation from 1 "
                                 f"to 6 and a width of {', '.join(map(str, LINK_WIDTHS))} (7:4x16)")
            out.pcie_best[int(gpu)] = (int(gen), int(width))
        return out

    def words(self) -> list[str]:
        """The command-line words that give these faults (``--xid 6:79 --pcie 7:4x16``)."""
        return ([w for k, code in sorted(self.xid.items()) for w in ("--xid", f"{k}:{code}")]
                + [w for k, (g, wd) in sorted(self.pcie_best.items()) for w in ("--pcie", f"{k}:{g}x{wd}")])


def _index(text: str, gpus: int) -> int | None:
    return int(text) if text.isdigit() and int(text) < gpus else None


def make_gpus(count: int, *, name: str = DEFAULT_GPU_NAME, total_mib: int = DEFAULT_TOTAL_MIB,
              reserved_mib: int = DEFAULT_RESERVED_MIB) -> list[SimGpu]:
    """``count`` GPUs with deterministic uuids (same index and name -> same uuid, run after run)."""
    if count < 1:
        raise ValueError("a simulated host needs at least one GPU")
    if not 0 <= reserved_mib < total_mib:
        raise ValueError("reserved memory must be below the total")
    return [
        SimGpu(index=i, uuid=f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{name}/{i}')}", name=name,
               total_mib=total_mib, reserved_mib=reserved_mib, pci=f"00000000:{i:02X}:00.0")
        for i in range(count)
    ]


@dataclass(frozen=True, slots=True)
class SimLayout:
    """Every path of one simulated host's directory."""

    root: Path

    @property
    def gpus_json(self) -> Path:
        return self.root / "gpus.json"

    @property
    def dev_dir(self) -> Path:
        return self.root / "dev"

    @property
    def dev_prefix(self) -> str:
        """Device files are ``dev_prefix + "0"``, ``dev_prefix + "ctl"``, ``dev_prefix + "-uvm"``."""
        return str(self.dev_dir / "nvidia")

    def gpu_dev(self, index: int) -> Path:
        return self.dev_dir / f"nvidia{index}"

    @property
    def ctl_dev(self) -> Path:
        return self.dev_dir / "nvidiactl"

    @property
    def uvm_dev(self) -> Path:
        return self.dev_dir / "nvidia-uvm"

    @property
    def holders_dir(self) -> Path:
        return self.root / "holders"

    def holder_file(self, pid: int) -> Path:
        return self.holders_dir / f"{pid}.json"

    @property
    def leaked_json(self) -> Path:
        return self.root / "leaked.json"

    @property
    def load_json(self) -> Path:
        return self.root / "load.json"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def pidfile(self) -> Path:
        return self.run_dir / "vllm.pid"

    @property
    def port_file(self) -> Path:
        return self.run_dir / "api.port"

    @property
    def service_log(self) -> Path:
        return self.run_dir / "vllm.log"

    @property
    def hf_home(self) -> Path:
        """The simulated service's HF_HOME: its model's config.json is cached there, as vLLM's download leaves it."""
        return self.root / "hf"

    def read_gpus(self) -> list[SimGpu]:
        data = json.loads(self.gpus_json.read_text())
        return [SimGpu(**g) for g in data["gpus"]]


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder and rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


SNAPSHOT = "5f0c3b1e9a7d4c2b8e6f1a3d5c7b9e0f2a4c6e8b"
"""The revision the simulated HF cache names in refs/main (any 40 hex digits)."""


def write_model_cache(layout: SimLayout, model: str) -> Path | None:
    """The served model's config.json in the simulated host's HF cache (``models--ORG--NAME/snapshots/REV``,
    ``refs/main`` naming REV), when the model is a preset's; the path written, else None (a model the
    simulated host has no config for: the campaign cannot identify it, as on a real host)."""
    from kimitui.bench.micro.presets import PRESETS

    data = next((d for d in PRESETS.values() if d.get("_name") == model), None)
    if data is None:
        return None
    repo = layout.hf_home / "hub" / ("models--" + model.replace("/", "--"))
    snap = repo / "snapshots" / SNAPSHOT
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    write_atomic(repo / "refs" / "main", SNAPSHOT)
    config = {k: v for k, v in data.items() if k != "_name"}
    write_atomic(snap / "config.json", json.dumps(config, indent=2))
    return snap / "config.json"


def create_layout(gpus: list[SimGpu], *, driver: str = DEFAULT_DRIVER, parent: str | None = None) -> SimLayout:
    """Make a fresh ``kimitui-sim-*`` directory with the GPU list and the device files."""
    from kimitui.hostside.procfs import start_time_of

    layout = SimLayout(Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent)))
    write_atomic(layout.root / OWNER_FILE, json.dumps({"pid": os.getpid(), "start_time": start_time_of(os.getpid())}))
    for sub in (layout.dev_dir, layout.holders_dir, layout.run_dir):
        sub.mkdir()
    devs = [layout.gpu_dev(g.index) for g in gpus] + [layout.ctl_dev, layout.uvm_dev]
    for dev in devs:
        with open(dev, "wb") as fh:
            fh.truncate(DEV_FILE_BYTES)
        dev.chmod(0o666)
    write_atomic(layout.gpus_json, json.dumps({"driver": driver, "gpus": [asdict(g) for g in gpus]}, indent=1))
    write_atomic(layout.load_json, json.dumps({"util": 0}))
    return layout


def _owner_of(root: Path) -> tuple[int, int] | None:
    """The recorded owner of a sim directory; None when there is no readable record."""
    try:
        data = json.loads((root / OWNER_FILE).read_text())
        pid, start = data["pid"], data["start_time"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if type(pid) is not int or type(start) is not int or pid <= 0:
        return None
    return pid, start


def remove_stale_layouts(parent: str | None = None) -> list[Path]:
    """Remove the ``kimitui-sim-*`` directories left by a sim whose owner is gone (a ``kill -9``): only this
    user's real directories whose owner record names a process that no longer runs with that start time. A
    directory with no readable record, another user's, or a live owner's is left alone. The ones removed."""
    from kimitui.hostside.procfs import start_time_of

    removed: list[Path] = []
    base = Path(parent or tempfile.gettempdir())
    try:
        entries = [e for e in base.iterdir() if e.name.startswith(PREFIX)]
    except OSError:
        return removed
    for root in entries:
        try:
            info = root.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        owner = _owner_of(root)
        if owner is None or start_time_of(owner[0]) == owner[1]:
            continue
        shutil.rmtree(root, ignore_errors=True)
        removed.append(root)
    return removed
