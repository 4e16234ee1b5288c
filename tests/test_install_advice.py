"""The command that installs a missing extra for this kimitui (issue 33 item 3; kimitui.commands.extras):
``pipx inject`` under pipx, the venv's pip with the clone's path in a clone, else this python's pip with the
extra's requirement; never ``pip install 'kimitui[figures]'``, which no index answers."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest

from kimitui.commands.extras import EXTRAS, install_command

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("prefix", ["/home/op/.local/share/pipx/venvs/kimitui", "/home/op/.local/pipx/venvs/kimitui"])
def test_under_pipx_the_advice_is_pipx_inject(prefix: str) -> None:
    assert install_command("figures", prefix=Path(prefix), executable=f"{prefix}/bin/python",
                           package_dir=ROOT / "kimitui") == "pipx inject kimitui 'matplotlib>=3.8'"


def test_a_pipx_home_elsewhere_is_known_by_its_metadata(tmp_path: Path) -> None:
    venv = tmp_path / "tools" / "kimitui-dev"
    venv.mkdir(parents=True)
    (venv / "pipx_metadata.json").write_text("{}")
    assert install_command("serve", prefix=venv) == "pipx inject kimitui-dev 'textual-serve>=1.1'"


def test_an_installed_wheel_gets_its_own_pythons_pip(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "kimitui").mkdir(parents=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    command = install_command("figures", prefix=tmp_path / "venv", executable=python, package_dir=site / "kimitui")
    assert shlex.split(command) == [python, "-m", "pip", "install", "matplotlib>=3.8"]


def test_another_projects_pyproject_is_no_clone_of_ours(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\n')
    (tmp_path / "kimitui").mkdir()
    assert install_command("figures", prefix=tmp_path / "v", executable="/usr/bin/python3",
                           package_dir=tmp_path / "kimitui") == "/usr/bin/python3 -m pip install 'matplotlib>=3.8'"


def test_a_clone_with_a_space_in_its_path_is_quoted(tmp_path: Path) -> None:
    clone = tmp_path / "my clone"
    (clone / "kimitui").mkdir(parents=True)
    (clone / "pyproject.toml").write_text('[project]\nname = "kimitui"\n')
    command = install_command("figures", prefix=clone / ".venv", executable=str(clone / ".venv/bin/python"),
                              package_dir=clone / "kimitui")
    assert shlex.split(command) == [str(clone / ".venv/bin/python"), "-m", "pip", "install", "-e",
                                    f"{clone}[figures]"]


def test_the_extras_are_pyprojects() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for name, requirement in EXTRAS.items():
        assert extras[name] == [requirement], name
