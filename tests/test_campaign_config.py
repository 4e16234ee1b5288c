"""The campaign file against malformed input: every key of the ``--init`` example given as a table, a list,
a scalar of another type, a non-finite number or a number out of range is one line naming the file and the
key (CampaignConfigError), never another exception; bad bytes, bad TOML and deep nesting likewise."""

from __future__ import annotations

import copy
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from kimitui.campaign.config import CampaignConfigError, load_config, parse_config
from kimitui.campaign.examples import INIT_TEXT

SHAPES: list[Any] = [{"a": 1}, [1, "x"], [], "text", 7, -7, 2.5, math.nan, math.inf, -math.inf, True, 10**30,
                     [[[1]]], {"deep": {"er": [1]}}]
"""What a key is replaced with: tables, lists, scalars of every TOML type, non-finite and huge numbers."""


def example() -> dict[str, Any]:
    return tomllib.loads(INIT_TEXT)


def every_key(data: dict[str, Any]) -> list[tuple[str, str]]:
    return [(section, key) for section, table in data.items() for key in table]


def test_the_example_loads() -> None:
    cfg = parse_config(example(), "campaign.toml")
    assert cfg.micro.tp == 8 and cfg.cleanup.threshold_mib == 64.0


@pytest.mark.parametrize(("section", "key"), every_key(example()))
def test_every_key_of_the_example_in_every_shape_is_one_line_or_loads(section: str, key: str) -> None:
    refused = 0
    for shape in SHAPES:
        data = copy.deepcopy(example())
        data[section][key] = shape
        try:
            parse_config(data, "campaign.toml")
        except CampaignConfigError as exc:
            message = str(exc)
            assert message.startswith("campaign.toml: ") and "\n" not in message and len(message) < 300, message
            assert f"[{section}]" in message, message
            refused += 1
    assert refused >= len(SHAPES) - 3  # a few shapes fit some keys (a string for a string key, ...)


@pytest.mark.parametrize("section", sorted(example()))
@pytest.mark.parametrize("shape", [[1, 2], [{"a": 1}], "x", 5, True, 1.5])
def test_a_section_that_is_not_a_table(section: str, shape: Any) -> None:
    data = example()
    data[section] = shape
    with pytest.raises(CampaignConfigError, match=rf"^campaign\.toml: \[{section}\]: expected a table, got "):
        parse_config(data, "campaign.toml")


@pytest.mark.parametrize(("edit", "message"), [
    ({"threshold_mib = 64": "threshold_mib = nan"}, "[cleanup] threshold_mib: expected a finite number, got nan"),
    ({"threshold_mib = 64": "threshold_mib = -1"}, "[cleanup] threshold_mib -1: 0 to"),
    ({"drain_s = 120": "drain_s = inf"}, "[cleanup] drain_s: expected a finite number, got inf"),
    ({"margin_pct = 10": "margin_pct = inf"}, "[check] margin_pct: expected a finite number"),
    ({"tp = 8": "tp = 3", "# preset = ": "preset = "}, "[model] preset kimi-k2.5 at tp 3: "),
    ({"# preset = ": 'preset = "kimi"  #'}, "[model] preset 'kimi': one of kimi-k2.5, glm-5"),
    ({"# config = \"/models": "config = \"models"}, "[model] config 'models/Kimi-K2.5/config.json': an absolute"),
    ({"# tp = 8 ": "tp = 100 "}, "[model] tp 100: 1 to 64"),
    ({"tp = 8": "tp = 100000"}, "[micro] ms 1 to 65,536, tp 1 to 64"),
    ({"sweep_max_bytes = 1073741824": "sweep_max_bytes = -5"}, "[micro] sweep_max_bytes 0 to"),
    ({'requests = "4x"': 'requests = "4000000x"'}, "[macro] requests per level at most 1,000,000"),
    ({"max_tokens = 128\ninput_len": "max_tokens = 99999999999\ninput_len"}, "[macro] max_tokens and input_len at"),
    ({'gpus = "all"': 'gpus = "0,x"'}, "[cleanup] gpus '0,x': all, or GPU indexes"),
    ({"requests = 8 ": "requests = 100000 "}, "[check] requests 1 to 1000"),
])
def test_numbers_out_of_range_are_found_at_load(tmp_path: Path, edit: dict[str, str], message: str) -> None:
    text = INIT_TEXT
    for old, new in edit.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(CampaignConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value), str(caught.value)


@pytest.mark.parametrize(("content", "message"), [
    (b'[campaign]\nname = "caf\xe9"\n', "not UTF-8 text (byte 0xe9 on line 2)"),
    (b'campaign = "x"\n', '[campaign]: expected a table, got \'x\''),
    (b"service = 5\n", "[service]: expected a table, got 5"),
    (b"[[macro]]\nconcurrency = [1]\n", "[macro]: expected a table, got a list"),
    (b"consent = []\n", "[consent]: expected a table, got a list"),
    (b"x = " + b"[" * 3000 + b"]" * 3000 + b"\n", "nested too deep"),
    (b"x = " + b"{a=" * 3000 + b"1" + b"}" * 3000 + b"\n", "nested too deep"),
    (b"[campaign]\n" + b"a." * 3000 + b"b = 1\n", "[campaign] unknown key 'a'"),
    (b"[macro]\nmax_tokens = " + b"[" * 50 + b"]" * 50 + b"\n",
     "[macro] max_tokens: expected a whole number, got a list"),
    (b"[campaign\n", "not TOML: "),
])
def test_a_malformed_file_is_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(content)
    with pytest.raises(CampaignConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text, text


PHASES = ["macro", "cleanup", "micro", "analysis", "restart", "check"]


@pytest.mark.parametrize("settings", [{"macro": [1, 2]}, {"macro": {"concurrency": "abc"}},
                                      {"macro": {"concurrency": [1, "x", None, 4]}}, {"macro": 5}])
def test_resume_of_a_run_whose_plan_has_another_shape(tmp_path: Path, settings: dict[str, Any]) -> None:
    from kimitui.campaign.resume import plan_resume
    from kimitui.core.events import CampaignPlan
    from kimitui.core.runfile import write_run

    path = tmp_path / "run.jsonl"
    write_run(path, [CampaignPlan(1.0, name="c", phases=PHASES, settings=settings)], host="demo")
    plan = plan_resume(path, PHASES)
    assert plan.todo == PHASES  # nothing ran: everything to do, the odd settings keep no level


@pytest.mark.parametrize("content", [b"\xff\xfe not a run\n", b"[1, 2]\n", b'{"format": "kimitui-run"}\n', b""])
def test_resume_of_a_file_that_is_not_a_run_is_one_line(tmp_path: Path, content: bytes) -> None:
    from kimitui.campaign.resume import ResumeError, plan_resume

    path = tmp_path / "run.jsonl"
    path.write_bytes(content)
    with pytest.raises(ResumeError) as caught:
        plan_resume(path, PHASES)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


@pytest.mark.parametrize("content", [b'[campaign]\nname = "\xff"\n', b"macro = " + b"[" * 3000 + b"]" * 3000 + b"\n",
                                     b"campaign = 5\n"])
def test_the_command_says_it_in_one_line_exit_2(tmp_path: Path, content: bytes) -> None:
    import os
    import subprocess
    import sys

    path = tmp_path / "c.toml"
    path.write_bytes(content)
    done = subprocess.run([sys.executable, "-m", "kimitui", "campaign", str(path), "--headless"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env={**os.environ, "XDG_DATA_HOME": str(tmp_path)})
    assert done.returncode == 2 and done.stderr.startswith(f"kimitui campaign: {path}: "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_macro_goodput_key_gives_the_sweep_its_slos(tmp_path: Path) -> None:
    old = '# goodput = "ttft:200,tpot:50"'
    assert old in INIT_TEXT
    path = tmp_path / "c.toml"
    path.write_text(INIT_TEXT.replace(old, 'goodput = "ttft:200,tpot:50"', 1))
    slo = load_config(path).macro.macro_config("http://127.0.0.1:8000").slo
    assert (slo.ttft_ms, slo.tpot_ms, slo.e2el_ms) == (200.0, 50.0, None)
    path.write_text(INIT_TEXT.replace(old, 'goodput = "ttft:fast"', 1))
    with pytest.raises(CampaignConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (f"{path}: [macro] goodput takes ttft:MS, tpot:MS or e2el:MS (MS a number >= 0), "
                                 "not 'ttft:fast'")
