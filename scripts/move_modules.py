"""Move kimitui's modules to new names and rewrite every reference to them (a maintainer's tool for the
house's moves: issue 21). Usage, from the repository root:

    python3 scripts/move_modules.py OLD=NEW [OLD=NEW ...]      # e.g. kimitui.bench.cli=kimitui.commands.bench

Each OLD module's file is moved with ``git mv`` (a package's ``__init__.py`` when OLD is a package folder's
module of that name), and in every tracked .py, .toml, .md, .sh and .cfg file outside docs/device-runs:
``from P import N [as A]`` naming a moved module is rewritten to import it from its new package (keeping the
name the code uses: ``as A``, else ``as N`` when the new name differs), and every dotted name ``OLD`` or
``OLD.x`` (imports, strings such as ``monkeypatch`` targets, docs) becomes ``NEW`` / ``NEW.x``. Longest names
first, in one pass, so a new name is never rewritten again (the dotted pass runs before the ``from`` one).
Prints the files it changed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = {".py", ".toml", ".md", ".sh", ".cfg", ".txt"}
SKIP = ("docs/device-runs/", "scripts/move_modules.py")


def module_file(name: str) -> Path:
    path = ROOT.joinpath(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def new_file(name: str) -> Path:
    return ROOT.joinpath(*name.split(".")).with_suffix(".py")


def rewrite(text: str, moves: dict[str, str]) -> str:
    names = sorted(moves, key=len, reverse=True)

    def from_import(match: re.Match[str]) -> str:
        package, items = match.group("pkg"), match.group("items")
        out_lines: list[str] = []
        kept: list[str] = []
        for item in [i.strip() for i in items.split(",") if i.strip()]:
            name, _, alias = (part.strip() for part in item.partition(" as "))
            full = f"{package}.{name}"
            if full in moves:
                new_pkg, _, new_name = moves[full].rpartition(".")
                use = alias or name
                tail = f" as {use}" if use != new_name else ""
                out_lines.append(f"{match.group('indent')}from {new_pkg} import {new_name}{tail}")
            else:
                kept.append(item)
        if not out_lines:
            return match.group(0)
        if kept:
            out_lines.insert(0, f"{match.group('indent')}from {package} import {', '.join(kept)}")
        return "\n".join(out_lines)

    # dotted names first (``from kimitui.report import x`` -> ``from kimitui.report.markdown import x``), then
    # the ``from PACKAGE import MODULE`` form, whose output the dotted pass must not see again
    dotted = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in names) + r")(?![\w])")
    text = dotted.sub(lambda m: moves[m.group(1)], text)
    return re.sub(r"^(?P<indent>[ \t]*)from (?P<pkg>kimitui(?:\.\w+)*) import (?P<items>[\w, ]+?)[ \t]*$",
                  from_import, text, flags=re.M)


def main(argv: list[str]) -> int:
    moves = dict(arg.split("=", 1) for arg in argv)
    sources = {old: module_file(old) for old in moves}  # before any move makes a folder of a module's name
    for old, src in sources.items():
        if not src.exists():
            print(f"no module {old} ({src})", file=sys.stderr)
            return 2
    for old, new in moves.items():
        src, dst = sources[old], new_file(new)
        dst.parent.mkdir(parents=True, exist_ok=True)
        init = dst.parent / "__init__.py"
        if not init.exists() and dst.parent != ROOT / "kimitui":
            init.write_text(f'"""{dst.parent.name}."""\n')
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
        subprocess.run(["git", "mv", str(src), str(dst)], cwd=ROOT, check=True)
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in listed.splitlines():
        path = ROOT / rel
        if path.suffix not in SUFFIXES or rel.startswith(SKIP) or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        new = rewrite(text, moves)
        if new != text:
            path.write_text(new, encoding="utf-8", errors="surrogateescape")
            print(rel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
