"""kimitui: a terminal dashboard for GPU profiling campaigns."""

from kimitui._version import __version__

__all__ = ["__version__"]
