"""``kimitui campaign`` as a user runs it (a real process on the simulated host): the whole campaign
headless, its report, resume after kimitui is killed (kill -9) in Phase 1 and during the transition, and
the file's errors and --init."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kimitui.campaign.config import CampaignConfigError, load_config
from kimitui.campaign.examples import INIT_TEXT
from kimitui.core.events import CampaignResume, MacroPoint, PhaseEnd
from kimitui.core.replay import state_at
from kimitui.core.runfile import RunReader
from tests.support import CLI_WAIT_S, cli_env, run_kimitui, write_campaign
from tests.waiting import wait_until


def the_run(tmp_path: Path) -> Path:
    (run,) = (tmp_path / "data" / "kimitui" / "runs").glob("*.jsonl")
    return run


def test_the_whole_campaign_headless_then_its_report(tmp_path: Path) -> None:
    done = run_kimitui(tmp_path, "campaign", str(write_campaign(tmp_path)), "--headless")
    assert done.returncode == 0, done.stderr
    assert "phase macro started" in done.stdout and "decode-step budget: At the " in done.stdout
    assert "campaign done: every phase over" in done.stdout and "Traceback" not in done.stderr
    run = the_run(tmp_path)
    reader = RunReader(run)
    assert reader.header.meta["command"] == "campaign" and reader.warnings == []
    c = state_at(reader, len(reader)).campaign
    assert c is not None and [p.status for p in c.phases.values()] == ["done"] * 6
    report = run_kimitui(tmp_path, "report", str(run)).stdout
    for heading in ("## Campaign", "## GPU memory through the transition", "## Drain before the graceful stop",
                    "## Phase 3: where a decode step's time goes", "## Post-restart check",
                    "Output tok/s against concurrency:"):
        assert heading in report, heading
    state = state_at(reader, len(reader))
    budget, served = state.budget, state.served_model
    assert budget is not None and budget.level
    # the model: named by the simulated server, its config.json read from the HF cache its process uses; Phase 2
    # measured its shapes and Phase 3 divided them
    assert served is not None and served.name == budget.model == "moonshotai/Kimi-K2.5", served
    assert "/hf/hub/models--moonshotai--Kimi-K2.5/snapshots/" in served.source and "(pid " in served.source
    assert {r.plan.model for r in state.micro_runs} == {served.name}
    assert "**Model:** moonshotai/Kimi-K2.5 (deepseek_v3, " in report
    assert f"**Verdict:** At the {budget.level} (" in report and f"| {budget.plateau_m} ({budget.level}) |" in report
    audit = [json.loads(line) for line in (tmp_path / "data" / "kimitui" / "audit.log").read_text().splitlines()]
    assert {a["event"] for a in audit} >= {"step_preview", "consent", "signal", "step_result"}


def wait_in_run(tmp_path: Path, proc: subprocess.Popen[str], marker: str) -> Path:
    """Poll the run file until a line holds ``marker`` (the process still running)."""
    def marked() -> Path | None:
        assert proc.poll() is None, f"kimitui ended early: {proc.stderr.read() if proc.stderr else ''}"
        runs = list((tmp_path / "data" / "kimitui" / "runs").glob("*.jsonl"))
        return runs[0] if runs and marker in runs[0].read_text() else None

    return wait_until(marked, f"{marker} in the run", CLI_WAIT_S)


def kill_9(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def start(tmp_path: Path, path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "kimitui", "campaign", str(path), "--headless"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=cli_env(tmp_path),
                            cwd=tmp_path)


def test_resume_after_a_kill_in_phase_1_redoes_no_finished_level(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, **{"concurrency = [1, 4]": "concurrency = [1, 2, 4]",
                                       "max_tokens = 12": "max_tokens = 40"})
    proc = start(tmp_path, path)
    try:
        run = wait_in_run(tmp_path, proc, '"type":"macro_point"')
    finally:
        kill_9(proc)
    before = [e.concurrency for e in RunReader(run).events() if isinstance(e, MacroPoint)]
    assert before and before[0] == 1 and len(before) < 3
    done = run_kimitui(tmp_path, "campaign", str(path), "--headless", "--resume", str(run))
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    assert f"resuming the campaign recorded in {run}" in done.stderr
    reader = RunReader(run)
    assert reader.warnings == [], "the torn line, if any, was cut off before appending"
    events = list(reader.events())
    counts = Counter(e.concurrency for e in events if isinstance(e, MacroPoint))
    assert counts == {1: 1, 2: 1, 4: 1}, "every level once: those finished before the kill were not redone"
    (resume,) = [e for e in events if isinstance(e, CampaignResume)]
    assert resume.cut_off == ["macro"] and resume.todo[0] == "macro" and not resume.done
    assert f"levels {', '.join(map(str, before))} kept" in resume.notes["macro"]
    cut = [e for e in events if isinstance(e, PhaseEnd) and e.phase == "macro" and e.note.startswith("cut off")]
    assert len(cut) == 1 and not cut[0].ok
    c = state_at(reader, len(reader)).campaign
    assert c is not None and c.end is not None and c.end.status == "done"
    assert c.phases["macro"].runs == 2 and all(p.status == "done" for p in c.phases.values())
    report = run_kimitui(tmp_path, "report", str(run)).stdout
    assert "- resumed: cut off Phase 1 macro" in report


def test_resume_after_a_kill_during_the_transition(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, **{"graceful_s = 1": "graceful_s = 20"})
    proc = start(tmp_path, path)
    try:  # the graceful stop waits for the stuck worker: kimitui is killed in that wait
        run = wait_in_run(tmp_path, proc, '"step":"graceful","accepted":true')
    finally:
        kill_9(proc)
    points = sum(1 for e in RunReader(run).events() if isinstance(e, MacroPoint))
    assert points == 2
    path.write_text(path.read_text().replace("graceful_s = 20", "graceful_s = 1"))
    done = run_kimitui(tmp_path, "campaign", str(path), "--headless", "--resume", str(run))
    assert done.returncode == 0, done.stderr
    events = list(RunReader(run).events())
    assert sum(1 for e in events if isinstance(e, MacroPoint)) == 2, "Phase 1 was over: not run again"
    (resume,) = [e for e in events if isinstance(e, CampaignResume)]
    assert resume.done == ["macro"] and resume.cut_off == ["cleanup"]
    assert resume.todo == ["cleanup", "micro", "analysis", "restart", "check"]
    ends = [e for e in events if isinstance(e, PhaseEnd) and e.phase == "cleanup"]
    assert ends[0].note.startswith("cut off") and ends[-1].ok
    c = state_at(RunReader(run), len(events)).campaign
    assert c is not None and c.end is not None and c.end.status == "done"


def test_a_finished_campaign_is_not_resumed(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, **{'[campaign]\n': '[campaign]\nphases = ["analysis"]\n'})
    done = run_kimitui(tmp_path, "campaign", str(path), "--headless")
    assert done.returncode == 1  # nothing measured: no verdict, the analysis ended not ok
    assert "campaign done: every phase over; not ok: Phase 3 analysis" in done.stdout
    run = the_run(tmp_path)
    again = run_kimitui(tmp_path, "campaign", str(path), "--headless", "--resume", str(run))
    assert again.returncode == 2 and "the campaign already ended (done" in again.stderr


def test_init_writes_an_example_that_loads(tmp_path: Path) -> None:
    done = run_kimitui(tmp_path, "campaign", "--init")
    assert done.returncode == 0 and (tmp_path / "campaign.toml").read_text() == INIT_TEXT
    cfg = load_config(tmp_path / "campaign.toml")
    assert cfg.host == "ssh://ops@gpu-node-01" and cfg.consent["graceful"] == "ask"
    again = run_kimitui(tmp_path, "campaign", "--init")
    assert again.returncode == 2 and "exists: not overwritten" in again.stderr


@pytest.mark.parametrize(("edit", "message"), [
    ({"concurrency = [1, 4]": "concurency = [1, 4]"}, "[macro] unknown key 'concurency'"),
    ({'graceful = "yes"': 'graceful = "sure"'}, "[consent] graceful = 'sure': ask, yes or no"),
    ({"max_tokens = 12": 'max_tokens = "12"'}, "[macro] max_tokens: expected a whole number"),
    # the load generator's own limits, checked by its own validate (one place says them)
    ({"concurrency = [1, 4]": "concurrency = [1, 4096]"}, "[macro] concurrency 4096 is out of range (1 to"),
    ({'requests = "1x"': 'requests = "1y"'}, "[macro] requests:"),
    ({'[campaign]\n': '[campaign]\nphases = ["micro", "macro"]\n'}, "phases must be in order"),
    ({'graceful = "yes"': 'graceful = "ask"'}, "consent graceful is 'ask', and a headless campaign cannot ask"),
])
def test_a_bad_file_is_one_line_and_runs_nothing(tmp_path: Path, edit: dict[str, str], message: str) -> None:
    done = run_kimitui(tmp_path, "campaign", str(write_campaign(tmp_path, **edit)), "--headless")
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "data" / "kimitui" / "runs").exists()


def test_a_missing_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(CampaignConfigError, match=r"no such campaign file.*--init"):
        load_config(tmp_path / "nope.toml")


def test_ctrl_c_aborts_a_headless_campaign_and_the_restart_is_offered(tmp_path: Path) -> None:
    from kimitui.core.events import CampaignControl, CampaignEnd, Consent, PhaseStart, StepPreview

    proc = start(tmp_path, write_campaign(tmp_path, **{"graceful_s = 1": "graceful_s = 4"}))
    try:  # in the transition's graceful wait (it runs to its deadline): Ctrl-C
        run = wait_in_run(tmp_path, proc, '"step":"graceful","accepted":true')
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=CLI_WAIT_S) == 1
    finally:
        if proc.poll() is None:
            kill_9(proc)
    assert "aborting the campaign" in (proc.stderr.read() if proc.stderr else "")
    events = list(RunReader(run).events())
    (ctl,) = [e for e in events if isinstance(e, CampaignControl)]
    assert ctl.action == "abort" and ctl.phase == "cleanup" and "Ctrl-C" in ctl.note
    assert not any(isinstance(e, PhaseStart) and e.phase == "micro" for e in events)
    # the restart is offered; the stuck worker still holds its GPU (the cleanup was cut short), so the preview
    # says so and the file's abort_restart = yes does not start the service beside it
    (preview,) = [e for e in events if isinstance(e, StepPreview) and e.step == "restart"]
    assert preview.action.startswith("GPU memory still held") and "finish the cleanup first" in preview.action
    restart = [e for e in events if isinstance(e, Consent) and e.step == "restart"]
    assert restart and not restart[0].accepted and "abort_restart = yes covers a start on free GPUs" in \
        restart[0].note
    (end,) = [e for e in events if isinstance(e, CampaignEnd)]
    assert end.status == "aborted"


# --- the first campaign file: --init's example edited to the demo host ----------------------------------

def init_for_demo(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """``kimitui campaign --init`` written for real, then edited as a new operator does: host = "demo",
    the demo's service, Phase 1 only (short); EDITS after that."""
    path = tmp_path / "campaign.toml"
    done = run_kimitui(tmp_path, "campaign", "--init", str(path))
    assert done.returncode == 0, done.stderr
    text = path.read_text()
    for old, new in (('host = "ssh://ops@gpu-node-01"', 'host = "demo"'),
                     ('spec = "systemd:vllm.service"', 'spec = "sim:vllm"'),
                     ('# phases = ["macro", "cleanup", "micro", "analysis", "restart", "check"]', 'phases = ["macro"]'),
                     ("concurrency = [1, 2, 4, 8, 16, 32, 64, 128]", "concurrency = [1]"),
                     ('requests = "4x"', 'requests = "1x"'), ("max_tokens = 128", "max_tokens = 8"),
                     ("warmup = 1", "warmup = 0"), *edits):
        assert old in text, old
        text = text.replace(old, new, 1)
    path.write_text(text)
    return path


def test_the_init_examples_api_url_left_on_the_demo_is_refused_in_words_before_phase_1(tmp_path: Path) -> None:
    """The example's api_url left in (its host made one that cannot resolve without a network: .invalid):
    the preflight's one request finds the name unknown, exit 2, nothing recorded; not a ConnectError
    "error -2" in Phase 1."""
    path = init_for_demo(tmp_path, ('"http://gpu-node-01:8000"', '"http://gpu-node-01.invalid:8000"'))
    done = run_kimitui(tmp_path, "campaign", str(path), "--headless", "--yes", "all")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "[service] api_url http://gpu-node-01.invalid:8000: cannot resolve gpu-node-01.invalid" in done.stderr
    assert 'leave api_url out with host = "demo"' in done.stderr, done.stderr
    assert "error -2" not in done.stderr and "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "data" / "kimitui" / "runs").exists()


def test_the_init_example_on_the_demo_without_an_api_url_uses_the_demos_server(tmp_path: Path) -> None:
    path = init_for_demo(tmp_path, ('api_url = "http://gpu-node-01:8000"', '# api_url = ""'))
    done = run_kimitui(tmp_path, "campaign", str(path), "--headless")
    assert done.returncode == 0 and "campaign done" in done.stdout, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "does not answer" not in done.stderr


def test_the_init_examples_comments_read_as_sentences() -> None:
    assert "(not the service's: only after others)" not in INIT_TEXT
    assert 'with host = "demo" leave it out' in INIT_TEXT
