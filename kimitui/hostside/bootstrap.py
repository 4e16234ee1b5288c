"""The in-memory importer a host program starts with: no file of it is written on the host.

The payload (kimitui/hosts/bundle.py) is this module's source, then ``install({PATH: SOURCE, ...})`` with
the hostside modules the program imports, then ``run(ENTRY)`` under ``if __name__ == "__main__"``. Each
module is compiled from its source under the name ``<kimitui-hostside>/hostside/PATH`` and its lines are
put in linecache, so a traceback names the module and the line and shows it (the excepthook prints through
the traceback module, which reads linecache; the interpreter's own reads only files).

A worker's payload is written to a file and run (worker_start): a multiprocessing "spawn" child re-runs
that file as ``__mp_main__``, which installs the modules again (``install`` is at the top level, ``run``
is not), so what the parent pickled imports in the child.
"""

from __future__ import annotations

import linecache
import sys

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from typing import Any

ORIGIN = "<kimitui-hostside>/"
"""What every module's file name starts with (no such file exists: the source is in memory)."""


class SourceImporter:
    """A meta path finder and loader over ``{"hostside/procfs.py": source, "hostside/agent/__init__.py":
    source, ...}``: ``hostside.procfs`` is the first, ``hostside.agent`` (a package) the second."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources

    def path_of(self, name: str) -> tuple[str, bool] | None:
        base = name.replace(".", "/")
        if base + "/__init__.py" in self.sources:
            return base + "/__init__.py", True
        if base + ".py" in self.sources:
            return base + ".py", False
        return None

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        found = self.path_of(name)
        if found is None:
            return None
        from importlib.machinery import ModuleSpec

        rel, package = found
        spec = ModuleSpec(name, self, origin=ORIGIN + rel, is_package=package)
        if package:
            spec.submodule_search_locations = [ORIGIN + rel.rpartition("/")[0]]
        spec.has_location = True  # __file__ is the name tracebacks show
        return spec

    def create_module(self, spec: Any) -> None:
        return None  # the default module

    def exec_module(self, module: Any) -> None:
        filename = module.__spec__.origin
        source = self.sources[filename[len(ORIGIN):]]
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # mtime None: kept
        exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)

    def get_source(self, name: str) -> str | None:
        found = self.path_of(name)
        return self.sources[found[0]] if found else None


def install(sources: dict[str, str]) -> SourceImporter:
    """Put the importer first on sys.meta_path (once: a second call adds its modules to the first's)."""
    for finder in sys.meta_path:
        if isinstance(finder, SourceImporter):
            finder.sources.update(sources)
            return finder
    importer = SourceImporter(dict(sources))
    sys.meta_path.insert(0, importer)
    return importer


def show_traceback(kind: Any, value: Any, tb: Any) -> None:
    """sys.excepthook: the traceback with the source lines of the in-memory modules."""
    import traceback

    traceback.print_exception(kind, value, tb)


def run(entry: str) -> None:
    """Import ENTRY and exit with what its main() returns (130 on ^C, 0 when the caller is gone)."""
    import importlib

    sys.excepthook = show_traceback
    module = importlib.import_module(entry)
    try:
        code = module.main()
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = 0
    sys.exit(code)
