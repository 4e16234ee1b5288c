"""The tabs' views and their parts: each draws the folded state (``show(state)``), never calls an engine."""
