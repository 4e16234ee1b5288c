"""Race-free signalling of a process named by (pid, start time).

``SIGNAL_SNIPPET`` is run by the host's own python3 (locally or over SSH) as
``python3 -c SNIPPET PID START_TIME SIGNUM``; it opens a pidfd first, then checks the start time, then
signals through the pidfd, so a pid reused between the check and the signal cannot be hit. It prints one
word (sent, gone, mismatch, error) and a detail.
"""

from __future__ import annotations

SIGNAL_SNIPPET = r"""
import os, signal, sys
pid, start, sig = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def out(word, detail=""):
    print(word, detail); sys.exit(0)
try:
    fd = os.pidfd_open(pid)
except ProcessLookupError:
    out("gone")
except OSError as e:
    fd = None
    if e.errno not in (38, 22):
        out("error", e.strerror)
try:
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
except FileNotFoundError:
    out("gone")
if fields[0] == "Z":
    out("gone", "zombie")
if int(fields[19]) != start:
    out("mismatch", "start time %s, expected %d" % (fields[19], start))
try:
    if fd is not None:
        signal.pidfd_send_signal(fd, sig)
    else:
        os.kill(pid, sig)
except ProcessLookupError:
    out("gone")
except PermissionError as e:
    out("error", "permission denied")
out("sent")
"""


def parse_signal_reply(text: str) -> tuple[str, str]:
    word, _, detail = text.strip().partition(" ")
    if word not in ("sent", "gone", "mismatch", "error"):
        return "error", f"unexpected reply {text.strip()[:80]!r}"
    return word, detail
