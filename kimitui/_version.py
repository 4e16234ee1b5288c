"""The version, in a module of its own: the entry point reads it where the package's __init__ is not run
(python -m kimitui from a folder holding a clone named kimitui makes that name a namespace package), and the
build reads it for the wheel's metadata (pyproject.toml's dynamic version)."""

__version__ = "0.1.0"
