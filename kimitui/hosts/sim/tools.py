"""The simulated host's ``nvidia-smi`` and ``systemctl``: what the GPU reset reads and changes (persistence
mode, MIG mode, an active display, the DCGM unit), kept in the sim directory, and the reset itself.

- ``DIR/modes.json``: ``{"<gpu>": {"persistence": bool, "mig": bool, "display": bool}}`` (absent GPUs:
  persistence on, MIG off, no display, as on the real 2 x H200 host of tests/fixtures/h200x2)
- ``DIR/units.json``: ``{"<unit>": "active" | "inactive"}`` (absent: no such unit)
- ``DIR/reset-fails.json`` (optional): ``{"<gpu>": "why"}``, a reset that fails even with nothing in use
- ``DIR/tool-calls.jsonl``: every call, ``["nvidia-smi", arg, ...]`` a line

A reset fails, as the real one does, while persistence mode, MIG, a display or an active DCGM unit keeps
the GPU in use; when it works it clears the GPU's ``leaked.json`` memory. Stdlib only (run as a script).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

DEFAULT_MODES = {"persistence": True, "mig": False, "display": False}
QUERY_FIELDS = {"index": None, "persistence_mode": "persistence", "mig.mode.current": "mig",
                "display_active": "display"}
DCGM_UNITS = ("nvidia-dcgm.service", "dcgm.service")


def install_tools(root: Path, python: str = sys.executable) -> tuple[Path, Path]:
    """Write DIR/bin/nvidia-smi and DIR/bin/systemctl (executables); returns their paths."""
    from kimitui.resources import package_root  # here: a tool's own run imports nothing but the stdlib

    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    paths = []
    for tool in ("nvidia-smi", "systemctl"):
        path = bin_dir / tool
        path.write_text(f"#!{python}\nimport sys\nsys.path.insert(0, {package_root()!r})\n"
                        "from kimitui.hosts.sim.tools import main\n"
                        f"sys.exit(main({tool!r}, {str(root)!r}, sys.argv[1:]))\n")
        path.chmod(0o755)
        paths.append(path)
    return paths[0], paths[1]


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _gpus(root: Path) -> list[dict]:
    return list(_load(root / "gpus.json").get("gpus", []))


def _modes(root: Path, index: int) -> dict:
    return {**DEFAULT_MODES, **_load(root / "modes.json").get(str(index), {})}


def _bus(root: Path, index: int) -> str:
    return next((str(g.get("pci")) for g in _gpus(root) if int(g.get("index", -1)) == index), f"GPU {index}")


def smi(root: Path, args: list[str]) -> int:
    if len(args) == 2 and args[0].startswith("--query-gpu=") and args[1].startswith("--format=csv"):
        fields = args[0].split("=", 1)[1].split(",")
        if any(f not in QUERY_FIELDS for f in fields):
            print(f"Field '{next(f for f in fields if f not in QUERY_FIELDS)}' is not a valid field to query.")
            return 2
        for g in _gpus(root):
            modes = _modes(root, int(g["index"]))
            print(", ".join(str(g["index"]) if f == "index" else
                            ("Enabled" if modes[QUERY_FIELDS[f]] else "Disabled") for f in fields))
        return 0
    if len(args) == 4 and args[0] == "-i" and args[2] == "-pm" and args[3] in ("0", "1"):
        index, on = int(args[1]), args[3] == "1"
        all_modes = _load(root / "modes.json")
        all_modes[str(index)] = {**_modes(root, index), "persistence": on}
        _save(root / "modes.json", all_modes)
        print(f"{'Enabled' if on else 'Disabled'} persistence mode for GPU {_bus(root, index)}.\nAll done.")
        return 0
    if len(args) == 3 and args[:2] == ["--gpu-reset", "-i"]:
        index = int(args[2])
        modes = _modes(root, index)
        units = _load(root / "units.json")
        if any(modes.values()) or any(units.get(u) == "active" for u in DCGM_UNITS):
            print(f"The following GPUs could not be reset:\n  GPU {_bus(root, index)}: In use by another client"
                  "\n\n1 device is currently being used by one or more other processes.")
            return 255
        fails = _load(root / "reset-fails.json").get(str(index))
        if fails:
            print(f"GPU {_bus(root, index)}: {fails}")
            return 3
        leaked = _load(root / "leaked.json")
        if leaked.pop(str(index), None) is not None:
            _save(root / "leaked.json", leaked)
        print(f"GPU {_bus(root, index)} was successfully reset.\nAll done.")
        return 0
    print(f"the simulated nvidia-smi does not do: {' '.join(args)}", file=sys.stderr)
    return 2


def systemctl(root: Path, args: list[str]) -> int:
    units = _load(root / "units.json")
    if len(args) >= 2 and args[0] == "is-active":
        states = [units.get(u, "inactive") for u in args[1:]]
        print("\n".join(states))
        return 0 if all(s == "active" for s in states) else 3
    if len(args) == 2 and args[0] in ("stop", "start"):
        if args[1] not in units:
            print(f"Failed to {args[0]} {args[1]}: Unit {args[1]} not loaded.", file=sys.stderr)
            return 5
        units[args[1]] = "active" if args[0] == "start" else "inactive"
        _save(root / "units.json", units)
        return 0
    print(f"the simulated systemctl does not do: {' '.join(args)}", file=sys.stderr)
    return 1


def main(tool: str, root_text: str, args: list[str]) -> int:
    root = Path(root_text)
    with open(root / "tool-calls.jsonl", "a") as fh:
        fh.write(json.dumps([tool, *args]) + "\n")
    return smi(root, args) if tool == "nvidia-smi" else systemctl(root, args)
