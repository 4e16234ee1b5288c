"""A host program as one payload: the source of one python program that holds the hostside modules ENTRY
imports (its relative imports followed through every module, those inside functions too) and loads them
from memory (kimitui/hostside/bootstrap.py: no file of them is written on the host), then runs ENTRY's
``main()``. The agent's payload goes on the bootstrap's stdin (kimitui/hosts/launch.py); a worker's is the
source of worker_start.

On the host the package is named ``hostside`` (its modules import each other relatively, so the same
files are ``kimitui.hostside`` here).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

HOSTSIDE = Path(__file__).resolve().parent.parent / "hostside"
PACKAGE = "hostside"

AGENT = "hostside.agent.server"
GEMM = "hostside.gemm"
ALLREDUCE = "hostside.allreduce"


def module_file(name: str) -> Path | None:
    """hostside.agent -> .../hostside/agent/__init__.py; hostside.procfs -> .../hostside/procfs.py."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = HOSTSIDE.joinpath(*parts[1:])
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def relative_imports(name: str, path: Path) -> set[str]:
    """The hostside modules this module imports (its relative imports, resolved; ``from . import x`` names
    the module x when there is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = package.split(".")
        base = base[: len(base) - node.level + 1]
        mod = ".".join([*base, node.module] if node.module else base)
        out.add(mod)
        out.update(f"{mod}.{a.name}" for a in node.names if module_file(f"{mod}.{a.name}") is not None)
    return out


def modules_for(entry: str) -> dict[str, str]:
    """{"hostside/agent/server.py": source, ...}: ENTRY, what it imports, and every package above them."""
    found: dict[str, Path] = {}
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        path = module_file(name)
        if path is None:
            raise ValueError(f"{name}: no such hostside module")
        found[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += sorted(relative_imports(name, path))
    return {found[n].relative_to(HOSTSIDE.parent).as_posix(): found[n].read_text(encoding="utf-8")
            for n in sorted(found)}


def program_of(sources: dict[str, str], entry: str) -> str:
    """A program's source: the bootstrap, ``install(SOURCES)``, then ``run(ENTRY)`` when run as __main__."""
    boot = (HOSTSIDE / "bootstrap.py").read_text(encoding="utf-8")
    return f"{boot}\n\ninstall({sources!r})\n\nif __name__ == \"__main__\":\n    run({entry!r})\n"


@cache
def program(entry: str) -> str:
    """The payload of the hostside program ENTRY (hostside.agent.server, hostside.gemm, ...)."""
    return program_of(modules_for(entry), entry)
