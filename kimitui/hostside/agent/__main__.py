"""``python3 -m hostside.agent`` (or ``kimitui.hostside.agent``): the agent run straight from the source tree,
without the launch bootstrap (lines untagged)."""

from __future__ import annotations

import sys

from .server import main

if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
