"""The layers' boundaries, as an import graph read from the source (every import statement, those inside
functions included), and as what the headless commands really load when they run.

- the core (kimitui.core) imports nothing else of kimitui;
- nothing outside kimitui.tui imports textual (or textual_plotext);
- bench/ and cleanup/ import neither kimitui.tui nor kimitui.hosts.sim;
- the engines (bench/, cleanup/, hosts/, fleet/) import no campaign, command, report or TUI module; only commands/
  imports commands/ (docs/architecture.md);
- no import cycle among kimitui's modules, the TUI included: its controllers never import the app (they see it
  as tui.controllers.port.AppPort, and use exactly its members); its views and widgets call no engine, and
  neither they nor its screens start anything (no phase, campaign, command, live wiring or controller);
- the host side (kimitui.hostside: the agent, the workers, the /proc library) imports nothing of kimitui but
  itself, and nothing but the stdlib, pynvml, torch and vLLM (it is sent to the GPU host alone);
- the cleanup steps reach the executor only through kimitui.cleanup.context.StepContext, and assign none of
  its fields.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "kimitui"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _imports_in(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of a file, parsed once (every worker of the parallel suite collects this module)."""
    tree = ast.parse(path.read_text(), str(path))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


def import_nodes(path: Path) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement of this file (those inside functions included), with the module a ``from``
    import names, relative imports resolved ("" for a plain ``import``)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    for node in _imports_in(path):
        if isinstance(node, ast.Import):
            yield node, ""
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                yield node, ".".join([*base, node.module] if node.module else base)
            else:
                yield node, node.module or ""


def imports_of(path: Path) -> set[str]:
    """Every module an import statement of this file names (relative imports resolved)."""
    out: set[str] = set()
    for node, mod in import_nodes(path):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        else:
            out.add(mod)
            out.update(f"{mod}.{alias.name}" for alias in node.names)
    return out


GRAPH = {module_name(p): imports_of(p) for p in PKG.rglob("*.py")}


def offenders(modules: str, forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list[str]:
    bad = []
    for mod, imported in sorted(GRAPH.items()):
        if not (mod == modules or mod.startswith(modules + ".")):
            continue
        for name in sorted(imported):
            hit = any(name == f or name.startswith(f + ".") for f in forbidden)
            ok = any(name == a or name.startswith(a + ".") for a in allowed)
            if hit and not ok:
                bad.append(f"{mod} imports {name}")
    return bad


def test_the_graph_was_read() -> None:
    # a broken reader would make every contract below pass vacuously
    assert "kimitui.core.session" in GRAPH
    assert "kimitui.core.runfile" in GRAPH["kimitui.core.session"]
    assert any(n.startswith("textual") for n in GRAPH["kimitui.tui.app"])


def test_core_imports_nothing_else_of_kimitui() -> None:
    assert offenders("kimitui.core", ("kimitui",), allowed=("kimitui.core",)) == []


def test_only_the_tui_imports_textual() -> None:
    bad = [line for line in offenders("kimitui", ("textual", "textual_plotext"))
           if not line.startswith("kimitui.tui")]
    assert bad == []


@pytest.mark.parametrize("package", ["kimitui.bench", "kimitui.cleanup"])
def test_bench_and_cleanup_know_neither_the_tui_nor_the_simulator(package: str) -> None:
    assert offenders(package, ("kimitui.tui", "kimitui.hosts.sim")) == []


ENGINES = ("kimitui.bench", "kimitui.cleanup", "kimitui.hosts", "kimitui.fleet")
ABOVE_ENGINES = ("kimitui.live", "kimitui.phases", "kimitui.campaign", "kimitui.commands", "kimitui.tui",
                 "kimitui.report")


@pytest.mark.parametrize("package", ENGINES)
def test_the_engines_import_no_phase_campaign_command_report_or_tui(package: str) -> None:
    """An engine (a load generator, the cleanup, a host) is used by the campaign, the commands and the views;
    it never reaches up to them (docs/architecture.md)."""
    assert offenders(package, ABOVE_ENGINES) == []


def test_only_the_commands_and_the_entry_point_import_the_commands() -> None:
    """commands/ is where engines, campaign and TUI are wired together: nothing below it imports it."""
    bad = [line for line in offenders("kimitui", ("kimitui.commands",))
           if not line.startswith(("kimitui.commands", "kimitui.__main__"))]
    assert bad == []


def test_the_report_imports_only_the_core_and_the_analysis() -> None:
    """docs/architecture.md: a report is made from a run's fold (the core) and, for a recorded run's budget, the
    analysis' pure arithmetic; no engine (the micro tables' lines are the core's: ``core/micro_words.py``)."""
    assert offenders("kimitui.report", ("kimitui",), allowed=("kimitui.core", "kimitui.report",
                                                              "kimitui.phases.analysis", "kimitui.resources",
                                                              "kimitui._version")) == []


def test_widgets_import_no_view() -> None:
    """A widget is a building block of the views (docs/architecture.md): it never reaches up into one."""
    assert offenders("kimitui.tui.widgets", ("kimitui.tui.views", "kimitui.tui.screens",
                                             "kimitui.tui.controllers", "kimitui.tui.app")) == []


def test_the_report_knows_no_command_campaign_machine_or_tui() -> None:
    assert offenders("kimitui.report", ("kimitui.commands", "kimitui.tui", "kimitui.campaign.machine",
                                        "kimitui.phases.macro")) == []


def module_edges(path: Path, modules: set[str]) -> set[str]:
    """The kimitui modules this file's import statements load: ``from P import m`` of a submodule m loads P.m
    (P's __init__ is already loading when a submodule of P asks for a sibling: not an edge back to P), of a
    name defined in P loads P; ``import P.m`` loads P.m."""
    out: set[str] = set()
    for node, mod in import_nodes(path):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in modules)
        else:
            for alias in node.names:
                full = f"{mod}.{alias.name}"
                out.add(full if full in modules else mod)
    return (out & modules) - {module_name(path)}


EDGES = {module_name(p): module_edges(p, set(GRAPH)) for p in PKG.rglob("*.py")}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module in GRAPH (module -> the modules it loads), each
    sorted: Tarjan's algorithm, iterative."""
    modules = set(graph)
    edges = {m: sorted(graph[m] & modules - {m}) for m in graph}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(groups)


def test_no_import_cycle() -> None:
    """No module is in a cycle (the host and its link: the link knows the host as ``LinkHost``; the TUI's
    controllers know the app as ``AppPort``)."""
    assert import_cycles(EDGES) == [], "an import cycle"
    # the host makes its link; the link knows the host only as a LinkHost
    assert "kimitui.hosts.link" in EDGES["kimitui.hosts.base"]
    assert "kimitui.hosts.base" not in EDGES["kimitui.hosts.link"]


def test_the_tui_controllers_never_import_the_app() -> None:
    """They type the app as AppPort (a Protocol), so the TUI has no import cycle (issue 21 item 2)."""
    assert offenders("kimitui.tui.controllers", ("kimitui.tui.app",)) == []
    assert "kimitui.tui.controllers.macro" in EDGES["kimitui.tui.app"]  # the app owns them


STARTERS = ("kimitui.phases", "kimitui.campaign", "kimitui.commands", "kimitui.live", "kimitui.tui.app",
            "kimitui.tui.controllers", "kimitui.tui.launch")
"""What starts work on the host, or wires it: a view, a widget or a screen imports none of it."""


@pytest.mark.parametrize("room", ["kimitui.tui.views", "kimitui.tui.widgets"])
def test_views_and_widgets_call_no_engine(room: str) -> None:
    """What they show comes from the fold (a view takes the state: docs/architecture.md), and its words from
    the core or the report's text; starting work on the host is a controller's."""
    assert offenders(room, ENGINES + STARTERS) == []


def test_screens_start_nothing() -> None:
    """A dialog may read its fields with the engine's parsers (a sweep's levels, a service spec) and is given
    what it may call (the cleanup dialog its lookup); what its answer starts is the controller's."""
    assert offenders("kimitui.tui.screens", STARTERS) == []


def app_members_used(path: Path) -> set[str]:
    """The attributes this module reads of an app: ``self.app.X`` and ``app.X`` (a parameter named app)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        self_app = isinstance(base, ast.Attribute) and base.attr == "app" and ast.unparse(base.value) == "self"
        if self_app or (isinstance(base, ast.Name) and base.id == "app"):
            out.add(node.attr)
    return out


def test_the_app_member_finder_sees_them(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("class C:\n    def f(self, app):\n        self.app.notify('x')\n        app._tabs.active = 'd'\n"
                     "        self.apps.x, self.app.session.state\n")
    assert app_members_used(probe) == {"notify", "_tabs", "session"}


def test_the_controllers_use_exactly_the_app_port() -> None:
    """AppPort names what the controllers use of the app, no more (a member no controller uses comes off it)
    and no less (a controller reaching past it fails here)."""
    from kimitui.tui.controllers.port import AppPort

    port = {name for name in vars(AppPort) if not name.startswith("_")} | set(AppPort.__annotations__)
    files = sorted((PKG / "tui" / "controllers").glob("*.py"))
    used = set().union(*(app_members_used(f) for f in files))
    assert len(files) >= 6
    assert used == port


async def test_the_app_is_an_app_port() -> None:
    from kimitui.core.session import Session
    from kimitui.tui.app import KimituiApp
    from kimitui.tui.controllers.port import AppPort

    app = KimituiApp(Session())
    async with app.run_test(size=(100, 30)):  # running: its screen is there to be read
        assert isinstance(app, AppPort) and all(c.app is app for c in app.controllers)
    assert len(app.controllers) == 4
    assert not isinstance(object(), AppPort)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


CLEANUP_STEPS = ["kimitui.cleanup.steps", "kimitui.cleanup.drain"]
"""They reach the executor through kimitui.cleanup.context.StepContext only."""


def field_writes(path: Path) -> list[str]:
    """Every assignment to an attribute of a function's parameter (``ex.x = ...``, ``ex.x.y += ...``)."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
            for t in targets:
                base = t
                while isinstance(base, ast.Attribute | ast.Subscript):
                    base = base.value
                if t is not base and isinstance(base, ast.Name) and base.id in params:
                    out.append(f"{path.name}:{node.lineno} {fn.name}: {ast.unparse(t)}")
    return out


@pytest.mark.parametrize("module", CLEANUP_STEPS)
def test_the_cleanup_steps_see_the_executor_only_through_its_interface(module: str) -> None:
    assert offenders(module, ("kimitui.cleanup.executor",)) == []
    assert "kimitui.cleanup.context.StepContext" in GRAPH[module]
    assert field_writes(ROOT / (module.replace(".", "/") + ".py")) == []


def test_the_field_write_finder_sees_one(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("async def step(ex, n):\n    ex.last_signal_mono = n\n    ex.report.clean += 1\n"
                     "    local = ex.report\n    local.clean = 2\n")
    assert [w.split(" ", 1)[1] for w in field_writes(probe)] == [
        "step: ex.last_signal_mono", "step: ex.report.clean"]


def test_a_host_is_what_its_link_needs() -> None:
    from kimitui.hosts.link import LinkHost
    from kimitui.hosts.local import LocalHost

    assert isinstance(LocalHost(), LinkHost)
    assert not isinstance(object(), LinkHost)


def test_the_executor_implements_the_step_interface() -> None:
    from kimitui.cleanup.context import StepContext
    from kimitui.cleanup.executor import CleanupExecutor
    from kimitui.cleanup.plan import CleanupTarget
    from kimitui.hosts.local import LocalHost

    async def never(_preview: object) -> None:
        raise AssertionError("not asked")

    ex = CleanupExecutor(LocalHost(), CleanupTarget(host="contract"), None, never)  # type: ignore[arg-type]
    # runtime_checkable: every member (the properties too: plain attributes on the executor) is present
    assert isinstance(ex, StepContext)
    assert not isinstance(object(), StepContext)


HOSTSIDE = sorted(m for m in GRAPH if m == "kimitui.hostside" or m.startswith("kimitui.hostside."))
"""Sent to the GPU host and run by its own python3: stdlib, plus torch / vLLM / pynvml where present."""
HOST_LIBRARIES = {"torch", "vllm", "pynvml", "__future__"}


def hostside_offenders(module: str) -> list[str]:
    """What MODULE imports that the host does not have: kimitui outside kimitui.hostside, or anything
    that is neither the stdlib nor torch, vLLM or pynvml."""
    bad = offenders(module, ("kimitui",), allowed=("kimitui.hostside",))
    allowed = set(sys.stdlib_module_names) | HOST_LIBRARIES
    bad += [f"{module} imports {n}" for n in sorted(GRAPH[module])
            if n.split(".")[0] not in allowed and not n.startswith("kimitui.")]
    return bad


def test_the_host_side_is_every_module_sent_to_the_host() -> None:
    assert {"kimitui.hostside.procfs", "kimitui.hostside.agent.server", "kimitui.hostside.gemm",
            "kimitui.hostside.allreduce", "kimitui.hostside.bootstrap"} <= set(HOSTSIDE)
    assert not [m for m in GRAPH if m.endswith(("gemm_worker", "allreduce_worker")) or m == "kimitui.hosts.agent"]


@pytest.mark.parametrize("module", HOSTSIDE)
def test_the_host_side_imports_only_itself_and_what_the_host_has(module: str) -> None:
    assert hostside_offenders(module) == []
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    ast.parse(path.read_text(), str(path), feature_version=(3, 8))  # the host's python3 may be 3.8


def test_the_host_side_checker_sees_a_violation() -> None:
    bad = PKG / "hostside" / "_contract_probe.py"
    try:
        bad.write_text("from . import procfs\nfrom ..hosts import base\nimport textual\n"
                       "def f():\n    import numpy\n    from kimitui.core import events\n")
        GRAPH[module_name(bad)] = imports_of(bad)
        found = hostside_offenders(module_name(bad))
    finally:
        bad.unlink()
        GRAPH.pop(module_name(bad), None)
    probe = "kimitui.hostside._contract_probe imports "
    for name in ("kimitui.hosts.base", "kimitui.core.events", "textual", "numpy"):
        assert probe + name in found
    assert not [line for line in found if "procfs" in line]  # a sibling is allowed


def test_the_contract_checker_sees_a_violation(tmp_path: Path) -> None:
    bad = PKG / "core" / "_contract_probe.py"
    try:
        bad.write_text("def f():\n    from kimitui.tui import app\n    from ..hosts import base\n")
        GRAPH[module_name(bad)] = imports_of(bad)
        found = offenders("kimitui.core", ("kimitui",), allowed=("kimitui.core",))
    finally:
        bad.unlink()
        GRAPH.pop(module_name(bad), None)
    assert "kimitui.core._contract_probe imports kimitui.tui.app" in found
    assert "kimitui.core._contract_probe imports kimitui.hosts.base" in found


PROBE = """
import json, sys
from kimitui.commands import main as cli
argv = json.loads(sys.argv[1])
try:
    cli.main(argv)
except SystemExit:
    pass
loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'textual_plotext', 'plotext')
                or m.startswith('kimitui.tui') or m.startswith('kimitui.hosts.sim'))
print(json.dumps(loaded))
"""


CAMPAIGN = """
[campaign]
name = "contract probe"
host = "local"
[service]
spec = "none"
api_url = "http://127.0.0.1:9"
"""
"""A campaign on this machine's GPUs (none here: it stops at the host's check, after the campaign's
modules, the host link and the target are loaded)."""


@pytest.mark.parametrize("argv", [
    ["replay", "--summary"],
    ["report"],
    ["compare", "campaign-demo-8x-rtx-pro-6000-allreduce-1x", "campaign-demo-8x-rtx-pro-6000-allreduce-2x"],
    ["shapes", "--tp", "8"],
    # each command's own code, not only its parser: the host opened (this machine has no GPU, so it stops
    # there with its one line) or the server asked
    ["cleanup", "--host", "local", "--service", "none", "--dry-run"],
    ["watch", "--host", "local", "--count", "1", "--json"],
    ["bench", "macro", "--url", "http://127.0.0.1:9/", "--concurrency", "1"],
    ["bench", "micro", "--host", "local", "--gemm"],
    ["campaign", "{campaign}", "--headless", "--yes", "drain,graceful,process,others,device,restart,abort_restart"],
    ["campaign", "--init", "{tmp}/init.toml"],
])
def test_headless_commands_load_no_ui(argv: list[str], tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    argv = [a.format(campaign=tmp_path / "campaign.toml", tmp=tmp_path) for a in argv]
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")})
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"kimitui {' '.join(argv)} loaded {loaded}"
    if argv[0] in ("cleanup", "watch", "bench", "campaign") and "--init" not in argv:
        # it got past its parser: the host was opened (no driver here) or the server was asked
        assert "no NVIDIA driver" in out.stderr or "ConnectError" in out.stderr, out.stderr


def test_every_file_named_test_holds_tests() -> None:
    """Helpers shared by test modules are named for what they are (agent_helpers.py), not test_*.py."""
    empty = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        if not any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")
                   for n in ast.walk(tree)):
            empty.append(path.name)
    assert len(list((ROOT / "tests").glob("test_*.py"))) > 10
    assert empty == []


def test_the_test_import_reader_sees_every_form(tmp_path: Path) -> None:
    """The reader of the rule below sees each way to name a module: ``from tests.x import``, ``import
    tests.x``, ``from tests import x``, ``from . import x`` and ``from .x import``, inside a function too."""
    f = tmp_path / "probe.py"
    f.write_text("from tests.test_a import h\nimport tests.test_b\nfrom tests import test_c, support\n"
                 "def f():\n    from . import test_d\n    from .test_e import g\n")
    assert helpers_and_tests_imported(f) == {"test_a", "test_b", "test_c", "support", "test_d", "test_e"}


def helpers_and_tests_imported(path: Path) -> set[str]:
    """The modules of tests/ that this file (a module of tests/) imports, by their name there."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("tests."))
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1 or mod == "tests" or mod.startswith("tests."):
                parts = mod.split(".")[1:] if mod.startswith("tests") and not node.level else mod.split(".")
                if parts and parts[0]:
                    out.add(parts[0])
                else:  # from tests import x / from . import x: each name is a module
                    out.update(a.name for a in node.names)
    return out


def test_no_test_module_imports_another() -> None:
    """A test module imports what it shares from a helper module (tests/support.py, waiting.py, the areas'
    rigs), never from another test module or conftest.py: moving or deleting one test file cannot break
    another, and a helper is found where helpers are (issue 31)."""
    modules = sorted((ROOT / "tests").glob("test_*.py"))
    bad = {p.name: sorted(n for n in helpers_and_tests_imported(p) if n.startswith("test_") or n == "conftest")
           for p in modules}
    assert len(modules) > 10
    assert {name: mods for name, mods in bad.items() if mods} == {}


MAX_MODULE_LINES = 500


def test_no_module_of_kimitui_is_over_500_lines() -> None:
    """A module that does one job reads whole (issues 21 and 36): none is over 500 lines (none is generated)."""
    files = sorted(PKG.rglob("*.py"))
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert len(files) > 100 and long == {}


def test_every_module_the_suite_classifies_is_a_test_module_of_one_kind() -> None:
    """tests/kinds.py names test modules that exist (a rename leaves no stale name behind, which would mark
    nothing and hand nothing out first), each under one kind."""
    from tests.kinds import KINDS, SLOW_FIRST

    modules = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    named = [m for names in KINDS.values() for m in names]
    assert sorted(set(named) - modules) == [] and sorted(set(SLOW_FIRST) - modules) == []
    assert len(named) == len(set(named)) and len(SLOW_FIRST) == len(set(SLOW_FIRST))
