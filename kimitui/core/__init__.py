"""The core: events, the run file, the fold, the session bus and replay.

It imports nothing else of kimitui (a test holds it to that): hosts, cleanup, benchmarks and the TUI are
built on it, never the other way round.
"""
