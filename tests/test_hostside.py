"""The host side as it travels: one payload per program (kimitui/hosts/bundle.py) holding the hostside modules
it imports, loaded from memory by the bootstrap (no file on the host) under the oldest python (3.8) and
the newest; tracebacks name the module and the line and show it; the micro workers run from their payload
through worker_start (a spawn child finds the modules too); and the one reading of a weight's dtype."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kimitui.bench.micro import shapes
from kimitui.hosts import bundle
from kimitui.hosts.launch import agent_payload
from kimitui.hosts.local import LocalHost
from kimitui.hostside import gemm
from tests.agent_helpers import host as host  # a fixture: a local agent under each python
from tests.agent_helpers import make_sim_dir
from tests.pythons import agent_pythons, label, require

PYTHONS = agent_pythons()
EACH_PYTHON = pytest.mark.parametrize("python", PYTHONS, ids=[label(p) for p in PYTHONS])


def run_program(python: str, source: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """SOURCE written to a file and run, as the agent runs a worker's (worker_start)."""
    path = cwd / "program.py"
    path.write_text(source)
    return subprocess.run([require(python), "-u", str(path), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_each_payload_holds_what_its_entry_imports_and_nothing_else() -> None:
    agent = bundle.modules_for(bundle.AGENT)
    assert {"hostside/__init__.py", "hostside/agent/__init__.py", "hostside/agent/server.py",
            "hostside/procfs.py", "hostside/signals.py", "hostside/wire.py", "hostside/topology.py"} <= set(agent)
    assert not {"hostside/gemm.py", "hostside/allreduce.py", "hostside/simholder.py"} & set(agent)
    worker = bundle.modules_for(bundle.GEMM)
    assert "hostside/gemm_torch.py" in worker  # imported inside main(): followed too
    assert "hostside/agent/server.py" not in worker and "hostside/simholder.py" in worker
    assert agent_payload().startswith(b"%d\n" % len(bundle.program(bundle.AGENT).encode()))
    with pytest.raises(ValueError, match="no such hostside module"):
        bundle.modules_for("hostside.nothing")


PROBE = '''
import json, os, sys
from . import procfs
from .agent import server


def main():
    mods = {n: m.__file__ for n, m in sys.modules.items() if n == "hostside" or n.startswith("hostside.")}
    print(json.dumps({"files": mods, "on_disk": [f for f in mods.values() if os.path.exists(f)],
                      "start": procfs.start_time_of(os.getpid()), "server": server.__name__}))
    return 0
'''


@EACH_PYTHON
def test_the_modules_are_loaded_from_memory_under_their_names(python: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    sources = dict(bundle.modules_for(bundle.AGENT), **{"hostside/probe.py": PROBE})
    res = run_program(python, bundle.program_of(sources, "hostside.probe"), work)
    assert res.returncode == 0, res.stderr
    found = json.loads(res.stdout)
    assert found["files"]["hostside.procfs"] == "<kimitui-hostside>/hostside/procfs.py"
    assert found["files"]["hostside.agent"] == "<kimitui-hostside>/hostside/agent/__init__.py"
    assert found["server"] == "hostside.agent.server" and found["on_disk"] == []
    assert isinstance(found["start"], int)
    assert sorted(p.name for p in work.iterdir()) == ["program.py"]  # no module file, no __pycache__


BOOM = '''from .wire import err


def main():
    limit = 3
    raise ValueError("boom at %d" % limit)
'''


@EACH_PYTHON
def test_a_traceback_names_the_module_and_line_and_shows_it(python: str, tmp_path: Path) -> None:
    sources = dict(bundle.modules_for("hostside.wire"), **{"hostside/boom.py": BOOM})
    res = run_program(python, bundle.program_of(sources, "hostside.boom"), tmp_path)
    assert res.returncode == 1 and res.stdout == ""
    assert 'File "<kimitui-hostside>/hostside/boom.py", line 6, in main' in res.stderr, res.stderr
    assert '    raise ValueError("boom at %d" % limit)' in res.stderr
    assert res.stderr.rstrip().endswith("ValueError: boom at 3")


SPAWN = '''import json, multiprocessing, os
from .procfs import start_time_of


def child(queue):
    queue.put(start_time_of(os.getpid()))


def main():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    start = queue.get(timeout=60)
    proc.join(60)
    print(json.dumps({"start": start, "exit": proc.exitcode}))
    return 0
'''


def test_a_spawned_child_of_a_worker_finds_the_modules(tmp_path: Path) -> None:
    """The worker's file is a real __main__: multiprocessing's spawn re-runs it as __mp_main__, which
    installs the modules again, so a function of a hostside module runs in the child."""
    sources = dict(bundle.modules_for("hostside.procfs"), **{"hostside/spawner.py": SPAWN})
    res = run_program(PYTHONS[-1], bundle.program_of(sources, "hostside.spawner"), tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["exit"] == 0 and isinstance(json.loads(res.stdout)["start"], int)


GEMM_SHAPES = [{"name": "o_proj", "n": 7168, "k": 1024, "dtype": "int4-g32"},
               {"name": "lm_head", "n": 2048, "k": 7168, "dtype": "fp8"}]


async def test_the_workers_run_modelled_from_their_payload(host: LocalHost, tmp_path: Path) -> None:
    """Both workers, sent as their payload through worker_start, under the agent's python (3.8, newest):
    the modelled figures, and the simulated memory each holds while it runs."""
    sim = make_sim_dir(tmp_path / "sim")
    w = await host.start_worker(bundle.program(bundle.GEMM), [
        "--shapes", json.dumps(GEMM_SHAPES), "--ms", "1,8", "--backends", "marlin,bf16",
        "--modelled", "rtx-pro-6000", "--sim-dir", str(sim), "--gpu", "1"])
    lines = [line async for line in w.lines()]
    assert w.returncode == 0, w.stderr_tail
    kinds = [line["type"] for line in lines]
    assert kinds[0] == "hello" and kinds[-1] == "done" and lines[-1]["rows"] == 4
    assert any(line["type"] == "log" and "fp8 is not benchmarked" in line["message"] for line in lines)
    rows = [line for line in lines if line["type"] == "row"]
    assert {(r["m"], r["backend"]) for r in rows} == {(1, "marlin"), (8, "marlin"), (1, "bf16"), (8, "bf16")}
    assert all(r["simulated"] and r["time_us"] > 0 for r in rows)
    ar = await host.start_worker(bundle.program(bundle.ALLREDUCE), [
        "--ranks", "2", "--modelled", "rtx-pro-6000", "--sim-dir", str(sim), "--tokens", "1,8",
        "--sweep-max", "0", "--burst-tokens", "1"])
    lines = [line async for line in ar.lines()]
    assert ar.returncode == 0, ar.stderr_tail
    rows = [line for line in lines if line["type"] == "row"]
    assert len(rows) == 2 * 2 + 1 and {r["ranks"] for r in rows} == {2}
    assert lines[0]["type"] == "hello" and any(line["type"] == "done" for line in lines)


def test_an_fp8_weight_is_one_byte_an_element_on_both_sides() -> None:
    """fp8 7168x2048 is 14,680,064 bytes (the worker said 29,360,128: it counted every unknown dtype as
    bf16); the caller's shape plan and the worker read a dtype through one function."""
    assert gemm.weight_bytes(7168, 2048, "fp8") == 14_680_064 == shapes.weight_bytes(7168, 2048, "fp8")
    for dtype in ("bf16", "int4-g32", "int8-g128", "fp8_e4m3", "float32"):
        assert gemm.weight_bytes(7168, 2048, dtype) == shapes.weight_bytes(7168, 2048, dtype)
    assert gemm.weight_bytes(7168, 2048, "int4-g32") == 7168 * 2048 // 2 + 7168 * 2048 // 32 * 2
    assert gemm.parse_dtype("int4-g32") == ("int", 4, 32) and gemm.parse_dtype("fp8") == ("other", "fp8")
    with pytest.raises(ValueError, match="unknown weight dtype"):
        gemm.weight_bytes(1, 1, "nf3")
    with pytest.raises(shapes.ShapeError):
        shapes.weight_bytes(1, 1, "nf3")


def test_no_module_of_the_host_side_or_its_launcher_is_over_600_lines() -> None:
    root = Path(bundle.HOSTSIDE)
    files = sorted(root.rglob("*.py")) + sorted((root.parent / "hosts").glob("*.py"))
    long = {str(p.relative_to(root.parent)): n for p in files if (n := len(p.read_text().splitlines())) > 600}
    assert len(files) > 20 and long == {}
