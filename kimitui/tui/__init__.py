"""The Textual dashboard: the only package of kimitui that imports textual.

``run_replay`` and ``run_live`` (in ``kimitui.tui.launch``) are what the CLI's commands call; importing this
package does not import textual.
"""

from kimitui.tui.launch import run_live, run_replay

__all__ = ["run_live", "run_replay"]
