"""The guarded signal: pidfd first, then the start-time check, then the signal through the pidfd."""

from __future__ import annotations

import errno
import os
import signal

from .procfs import read_stat

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any, Callable

    from .procfs import ProcStat


_PIDFD_SYSCALLS = {"x86_64": (434, 424), "aarch64": (434, 424), "arm64": (434, 424), "armv7l": (434, 424),
                   "ppc64le": (434, 424), "s390x": (434, 424), "riscv64": (434, 424)}
"""(pidfd_open, pidfd_send_signal) numbers for pythons without os.pidfd_open (3.8): the same on every
architecture of the unified syscall table (kernel >= 5.3)."""
_libc: Any = None


def _syscall(*args: int) -> int:
    global _libc
    import ctypes

    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    res = _libc.syscall(*[ctypes.c_long(a) for a in args])
    if res < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(res)


def _pidfd_open(pid: int) -> int | None:
    """A pidfd for PID, None when this kernel or python has none (then kill() after the check)."""
    fn = getattr(os, "pidfd_open", None)
    nums = _PIDFD_SYSCALLS.get(os.uname().machine)
    try:
        if fn is not None:
            return int(fn(pid))
        if nums is None:
            return None
        return _syscall(nums[0], pid, 0)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            raise ProcessLookupError(errno.ESRCH, "No such process") from None
        if exc.errno in (errno.ENOSYS, errno.EPERM):  # an old kernel, or a seccomp filter that forbids it
            return None
        raise


def _pidfd_send_signal(fd: int, sig: int) -> None:
    fn = getattr(signal, "pidfd_send_signal", None)
    if fn is not None:
        fn(fd, sig)
        return
    try:
        _syscall(_PIDFD_SYSCALLS[os.uname().machine][1], fd, sig, 0, 0)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            raise ProcessLookupError(errno.ESRCH, "No such process") from None
        if exc.errno == errno.EPERM:
            raise PermissionError(errno.EPERM, "Operation not permitted") from None
        raise


def guarded_signal(pid: int, start_time: int, sig: int, proc_root: str = "/proc",
                   check: Callable[[ProcStat], tuple[str, str] | None] | None = None) -> tuple[str, str]:
    """Signal the process only if (pid, start time) still match: ("sent" | "gone" | "mismatch" | "error" |
    what ``check`` said, detail). The pidfd is opened before the check, so a pid reused between the check and
    the signal is never hit; where there is no pidfd the check is made right before kill(). ``check`` (the
    agent's last look: what the process is now, what would die with it) runs after the identity check, right
    before the signal: an (outcome, detail) from it is returned instead of sending."""
    try:
        fd = _pidfd_open(pid)
    except ProcessLookupError:
        return "gone", ""
    except OSError as exc:
        return "error", exc.strerror or str(exc)
    try:
        st = read_stat(pid, proc_root)
        if st is None:
            return "gone", ""
        if st.state in ("Z", "X"):
            return "gone", "zombie"
        if st.start_time != start_time:
            return "mismatch", f"start time {st.start_time}, expected {start_time}"
        if check is not None:
            stop = check(st)
            if stop is not None:
                return stop
        try:
            if fd is not None:
                _pidfd_send_signal(fd, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return "gone", ""
        except PermissionError:
            return "error", "permission denied"
        except OSError as exc:
            return "error", exc.strerror or str(exc)
        return "sent", ""
    finally:
        if fd is not None:
            os.close(fd)



def killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
