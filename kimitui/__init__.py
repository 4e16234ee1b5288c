"""kimitui: a terminal dashboard for GPU profiling campaigns."""

__version__ = "0.1.0"
