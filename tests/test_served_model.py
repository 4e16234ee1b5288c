"""The campaign knows its model (issue 35): the agent finds the served model's config.json as the server's own
processes see their files (an HF cache their environment names, a folder relative to their working directory),
under the oldest and the newest python; ``identify`` takes the file's [model], else the server's word
(``/v1/models`` on a real HTTP server), else the preset, and refuses to go on with none; Phase 3 counts only
the micro rows measured for that model."""

from __future__ import annotations

import base64
import http.server
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kimitui.campaign.config import CampaignConfig, parse_config
from kimitui.campaign.served_model import ModelUnknown, identify
from kimitui.core.events import GemmRow, MacroPoint, MicroPlan, ServedModel
from kimitui.core.state import fold_all
from kimitui.hosts.local import LocalHost
from kimitui.phases.analysis import decode_budget
from tests.agent_helpers import host as host

FIXTURES = Path(__file__).parent / "fixtures" / "shapes"
LLAMA = json.loads((FIXTURES / "llama-tiny.json").read_text())
QWEN3_MOE = json.loads((FIXTURES / "qwen3-moe-tiny.json").read_text())


def cache(root: Path, repo: str, config: dict[str, Any], revs: tuple[str, ...] = ("a" * 40,),
          main: str | None = None) -> Path:
    """An HF hub cache holding ``repo`` at each revision (the last written newest), refs/main naming ``main``."""
    folder = root / "hub" / ("models--" + repo.replace("/", "--"))
    for i, rev in enumerate(revs):
        snap = folder / "snapshots" / rev
        snap.mkdir(parents=True)
        (snap / "config.json").write_text(json.dumps(dict(config, _rev=rev)))
        os.utime(snap, (1_000_000 + i, 1_000_000 + i))
    if main is not None:
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(main)
    return folder


@pytest.fixture
def server_proc(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A stand-in for the server's process: its HF_HOME and working directory are not the agent's."""
    (tmp_path / "srv").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME")}
    proc = subprocess.Popen(["sleep", "60"], cwd=tmp_path / "srv", env=dict(env, HF_HOME=str(tmp_path / "hf"),
                                                                            HOME=str(tmp_path / "home")))
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def test_the_revision_refs_main_names_in_the_cache_the_servers_environment_names(
        host: LocalHost, tmp_path: Path, server_proc: subprocess.Popen[bytes]) -> None:
    """An HF id is looked up in the cache the server's HF_HOME names (not the agent's), at the revision
    refs/main names even where another snapshot is newer."""
    cache(tmp_path / "hf", "org/m", LLAMA, revs=("b" * 40, "c" * 40), main="b" * 40)
    res = await host.request("model_config", {"names": ["org/m"], "pids": [server_proc.pid]})
    found = res["found"]
    assert found["path"] == str(tmp_path / "hf" / "hub" / "models--org--m" / "snapshots" / ("b" * 40) / "config.json")
    assert found["where"] == f"pid {server_proc.pid}" and found["name"] == "org/m"
    assert json.loads(base64.b64decode(found["data"]))["_rev"] == "b" * 40
    alone = await host.request("model_config", {"names": ["org/m"], "pids": []})
    assert alone["found"] is None and alone["tried"], "the agent's own HF cache does not hold it"


async def test_a_relative_folder_is_the_servers_working_directorys(
        host: LocalHost, tmp_path: Path, server_proc: subprocess.Popen[bytes]) -> None:
    model = tmp_path / "srv" / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(LLAMA))
    res = await host.request("model_config", {"names": ["./models/tiny"], "pids": [server_proc.pid]})
    assert res["found"]["path"] == str(model / "config.json")
    newest = cache(tmp_path / "hf", "org/m", LLAMA, revs=("d" * 40, "e" * 40))  # no refs/main: the newest
    res = await host.request("model_config", {"names": ["org/m"], "pids": [server_proc.pid]})
    assert res["found"]["path"] == str(newest / "snapshots" / ("e" * 40) / "config.json")


async def test_what_is_not_a_config_is_tried_and_said_never_waited_on(
        host: LocalHost, tmp_path: Path, server_proc: subprocess.Popen[bytes]) -> None:
    """A FIFO named config.json (reading it would block), a file past the cap, a name that is not there: each
    in ``tried`` with why, and the reply comes."""
    fifo = tmp_path / "srv" / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "config.json")
    big = tmp_path / "srv" / "big"
    big.mkdir()
    (big / "config.json").write_bytes(b" " * ((4 << 20) + 1))
    res = await host.request("model_config", {"names": ["./fifo", "./big", "/nonexistent/m"],
                                              "pids": [server_proc.pid]})
    assert res["found"] is None
    why = {path: reason for path, reason in res["tried"]}
    assert why[str(fifo / "config.json")].startswith("not a regular file"), why
    assert why[str(big / "config.json")] == f"larger than {4 << 20} bytes", why
    assert why["/nonexistent/m/config.json"] == "no such file", why


class Models(http.server.BaseHTTPRequestHandler):
    listed: list[dict[str, Any]] = []

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": self.listed}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def models_server() -> Iterator[tuple[str, type[Models]]]:
    handler = type("Handler", (Models,), {"listed": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def campaign(model: dict[str, Any] | None = None, macro_model: str = "") -> CampaignConfig:
    data: dict[str, Any] = {"campaign": {"host": "local"}, "service": {"spec": "none", "api_url": "http://x"},
                            "micro": {"tp": 2}}
    if model:
        data["model"] = model
    if macro_model:
        data["macro"] = {"model": macro_model}
    return parse_config(data, "c.toml")


async def test_the_servers_folder_is_read_and_named(tmp_path: Path, models_server: tuple[str, type[Models]]) -> None:
    """vLLM's /v1/models: ``root`` the folder it loaded, ``id`` the served name; the first listed unless Phase 1
    names another. The name is the served one; the source says where the file was read."""
    url, handler = models_server
    folder = tmp_path / "qwen3-moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN3_MOE))
    handler.listed = [{"id": "other", "root": "/nonexistent"},
                      {"id": "qwen-moe", "root": str(folder), "object": "model"}]
    async with LocalHost("box") as h:
        served = await identify(campaign(macro_model="qwen-moe"), h, url, [], needed=True)
    assert served.name == "qwen-moe" and served.family == "qwen3_moe" and served.tp == 2
    assert served.source == f"the server's {folder} / qwen-moe: {folder / 'config.json'} (the agent)"
    assert served.server_names == [str(folder), "qwen-moe"] and not served.note
    assert served.params_total and served.params_active and served.params_active < served.params_total


async def test_a_model_found_nowhere_is_the_preset_said_or_one_line(
        tmp_path: Path, models_server: tuple[str, type[Models]]) -> None:
    url, handler = models_server
    handler.listed = [{"id": "org/unknown", "root": "org/unknown"}]
    async with LocalHost("box") as h:
        with pytest.raises(ModelUnknown) as caught:
            await identify(campaign(), h, url, [], needed=True)
        line = str(caught.value)
        assert "\n" not in line and line.startswith("c.toml: the served model (org/unknown) was not found on the host")
        assert line.endswith("name it in [model] (preset = \"kimi-k2.5\", or config = PATH of its config.json on "
                             "the host)")
        fallback = await identify(campaign({"preset": "glm-5"}), h, url, [], needed=True)
        assert fallback.name == "zai-org/GLM-5" and fallback.source == "[model] preset glm-5"
        assert fallback.note.startswith("the served model (org/unknown) was not found on the host")
        quiet = await identify(campaign(), h, url, [], needed=False)
        assert not quiet.identified and quiet.server_names == ["org/unknown"]
        handler.listed = []
        with pytest.raises(ModelUnknown, match="lists no model"):
            await identify(campaign(), h, url, [], needed=True)


async def test_the_files_config_comes_first_and_a_tp_it_cannot_split_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    async with LocalHost("box") as h:
        served = await identify(campaign({"config": str(tmp_path), "tp": 1}), h, "", [], needed=True)
        assert served.name == tmp_path.name and served.tp == 1 and served.source.startswith("[model] config ")
        with pytest.raises(ModelUnknown, match=r"at TP=64: "):
            await identify(campaign({"config": str(tmp_path), "tp": 64}), h, "", [], needed=True)
        with pytest.raises(ModelUnknown, match=r"\[model\] config /nonexistent: .*no such file"):
            await identify(campaign({"config": "/nonexistent"}), h, "", [], needed=True)


def _plan(run_id: str, model: str, tp: int = 8) -> MicroPlan:
    gemm = {"name": "o_proj", "n": 7168, "k": 1024, "dtype": "bf16", "calls_per_token": 61, "experts": 0}
    return MicroPlan(1.0, run_id=run_id, model=model, tp=tp, parts=["gemm"], gemms=[gemm], ms=[1])


def test_phase_3_counts_only_the_rows_of_the_served_model() -> None:
    """Rows measured for another model (or at another TP) are refused, and said; those of the served model
    make the budget, which names it."""
    point = MacroPoint(2.0, concurrency=1, metrics={"median_tpot_ms": 20.0, "output_throughput": 50.0,
                                                    "completed": 4, "failed": 0})
    rows = [GemmRow(3.0, run_id=rid, name="o_proj", m=1, backend="bf16", time_us=us)
            for rid, us in (("other", 900.0), ("tp4", 800.0), ("mine", 10.0))]
    served = ServedModel(0.5, name="org/served", tp=8)
    state = fold_all([served, point, _plan("other", "org/other"), _plan("tp4", "org/served", tp=4),
                      _plan("mine", "org/served"), *rows])
    budget = decode_budget(state)
    assert budget.model == "org/served"
    assert budget.missing[:2] == [
        "micro rows measured for org/other at TP=8, not for the served org/served at TP=8: not counted",
        "micro rows measured for org/served at TP=4, not for the served org/served at TP=8: not counted"]
    assert budget.rows[0].bf16_gemm_ms == pytest.approx(10.0 * 61 / 1000)
    alone = decode_budget(fold_all([served, point, _plan("other", "org/other"), rows[0]]))
    assert "no GEMM rows: Phase 2 measured no GEMM for org/served" in alone.missing and alone.rows[0].gemm_ms is None
