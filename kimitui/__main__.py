"""``python -m kimitui``. Ctrl-C while the command's modules are still being imported (the first half
second) ends with one line and exit status 130, as ``main`` does while it reads the command line, never a
``KeyboardInterrupt`` traceback. Nothing of kimitui is imported to say so: the import is what was cut."""

import signal
import sys


def _run() -> int:
    try:
        from kimitui.commands.main import main
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while it is said: the process is ending
        print("kimitui: interrupted before the command started", file=sys.stderr)
        return 130
    return main()


sys.exit(_run())
