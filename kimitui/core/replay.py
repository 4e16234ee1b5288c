"""Replay: a recorded run fed through the same session and fold as live data, at its recorded pace.

The player is driven by whoever owns the clock (the TUI's timer, a test, a headless loop) calling
``advance(now)``; it never sleeps. Seeking rebuilds the state from the run's index: every non-sample
event before the target plus only the last samples the memory history can hold (and the samples of a
serving level being metered, whose energy is the power of every sample it ran through), which gives the
same state as folding every event from the start (tests hold it to that) at a fraction of the cost: on the
bundled campaign a seek to its end takes 21 ms where it took 14 ms without its levels' energy.
"""

from __future__ import annotations

import bisect
import heapq
import pickle
import time
from collections.abc import Callable

from kimitui.core.events import HostSample
from kimitui.core.runfile import RunReader
from kimitui.core.sample_memory import MEMORY_ERRORS, line_memory
from kimitui.core.session import Session
from kimitui.core.state import HISTORY_POINTS, SessionState, fold, record_memory

SPEEDS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
PHASE_TYPES = ("phase_start", "phase_end")


CHECKPOINT_EVERY = 256
"""Non-sample events between two snapshots of their fold (a day of 4 Hz samples has a few thousand)."""


class Checkpoints:
    """Snapshots of the fold of a run's non-sample events, every ``CHECKPOINT_EVERY`` of them, taken the first
    time a seek goes past them: a seek starts from the nearest one before it instead of from the start.
    Kept pickled in memory, never on disk (a snapshot is then a copy nothing else can change, and nothing
    read from a file is ever unpickled)."""

    def __init__(self, reader: RunReader, index: tuple[list[int], list[int]]) -> None:
        self._reader, (self._samples, self._others) = reader, index
        self._front = SessionState()
        self._snaps: list[bytes] = [pickle.dumps(self._front)]
        """Snapshot ``j``: the fold of others[: j * CHECKPOINT_EVERY]."""

    def state_after(self, k: int) -> SessionState:
        """A new state: the fold of the first ``k`` non-sample events (and no sample)."""
        j = k // CHECKPOINT_EVERY
        while len(self._snaps) <= j:
            done = (len(self._snaps) - 1) * CHECKPOINT_EVERY
            self._fold(self._front, done, done + CHECKPOINT_EVERY)
            self._snaps.append(pickle.dumps(self._front))
        state = pickle.loads(self._snaps[j])
        self._fold(state, j * CHECKPOINT_EVERY, k)
        return state

    def _fold(self, state: SessionState, start: int, stop: int) -> None:
        fold_others(state, self._reader, (self._samples, self._others), start, stop)


def fold_others(state: SessionState, reader: RunReader, index: tuple[list[int], list[int]], start: int,
                stop: int) -> None:
    """Fold the non-sample events ``others[start:stop]``; the samples between them (and those between
    ``others[start - 1]`` and ``others[start]``, not those after ``others[stop - 1]``) go to a level being
    metered, if one is: its energy is the power of every sample it ran through (``level_energy``)."""
    samples, others = index
    if 0 < start < stop:
        meter_samples(state, reader, samples, others[start - 1], others[start])
    for n in range(start, stop):
        ev = reader.decoded(others[n])
        if ev is not None:
            fold(state, ev)
        if n + 1 < stop:
            meter_samples(state, reader, samples, others[n], others[n + 1])


def meter_samples(state: SessionState, reader: RunReader, samples: list[int], after: int, before: int) -> None:
    """The samples recorded between positions ``after`` and ``before`` (both excluded) fed to the level being
    metered; nothing when none is (decoding a sample costs, and only a running level needs them)."""
    meter = state.sweeps[-1].meter if state.sweeps else None
    if meter is None:
        return
    for i in samples[bisect.bisect_right(samples, after) : bisect.bisect_left(samples, before)]:
        ev = reader.decoded(i)
        if isinstance(ev, HostSample):
            meter.sample(ev)


def state_at(reader: RunReader, position: int, *, _index: tuple[list[int], list[int]] | None = None,
             checkpoints: Checkpoints | None = None) -> SessionState:
    """The state after folding events [0, position) of the run: every non-sample event (from the nearest
    checkpoint) and the last samples the memory history holds."""
    samples, others = _index or split_index(reader)
    position = max(0, min(position, len(reader)))
    j = bisect.bisect_left(samples, position)
    window = samples[max(0, j - HISTORY_POINTS) : j]
    k = bisect.bisect_left(others, position)
    # The non-sample events before the window are folded first: the window's samples play no part in them.
    k0 = bisect.bisect_left(others, window[0]) if window else k
    if checkpoints is None:
        state = SessionState()
        fold_others(state, reader, (samples, others), 0, k0)
    else:
        state = checkpoints.state_after(k0)
    if k0:  # the samples after the last of those events and before the window
        meter_samples(state, reader, samples, others[k0 - 1], window[0] if window else position)
    last_sample = window[-1] if window else -1
    for i in heapq.merge(others[k0:k], window):
        if i == last_sample or reader.types[i] != "sample":
            ev = reader.decoded(i)
            if ev is not None:
                fold(state, ev)
        else:
            meter_samples(state, reader, samples, i - 1, i + 1)
            _fold_history_only(state, reader, i)
    state.events_folded = position
    return state


def _fold_history_only(state: SessionState, reader: RunReader, i: int) -> None:
    """What an older sample leaves in the state once newer samples followed: its memory points, from the
    run's index where it holds them, else from the line. (Only the fields read are checked, so a sample
    malformed elsewhere, in its process list say, leaves its memory points here where a fold from the start
    skips it whole.)"""
    if i in reader.skipped:
        return
    points = reader.memory_points(i)
    if points is not None:
        t, used = points
    else:
        try:
            t, used = line_memory(reader.raw(i))
        except MEMORY_ERRORS:  # not JSON, not UTF-8, a field of the wrong type: the whole line, so the
            ev = reader.decoded(i)  # warning says why (once)
            if not isinstance(ev, HostSample):
                return
            t, used = ev.t, [(g.index, g.mem_used_mib) for g in ev.gpus]
    record_memory(state, t, used)
    if t > state.clock:
        state.clock = t


def split_index(reader: RunReader) -> tuple[list[int], list[int]]:
    samples: list[int] = []
    others: list[int] = []
    for i, ty in enumerate(reader.types):
        (samples if ty == "sample" else others).append(i)
    return samples, others


PREV_GRACE_S = 2.0
"""How soon after a boundary (wall seconds) a previous-phase jump goes past it to the one before."""


class Player:
    """Plays a run into a session: pause, speed, step, seek, phase jumps."""

    def __init__(self, reader: RunReader, session: Session | None = None,
                 clock: Callable[[], float] = time.monotonic, speed: float = 1.0) -> None:
        self.reader = reader
        self.session = session or Session()
        self.clock = clock
        self.speed = speed
        self.paused = False
        self.position = 0
        self._index = split_index(reader)
        self._checkpoints = Checkpoints(reader, self._index)
        self.loop = False
        """Playing on from the end starts again from the beginning."""
        # A boundary is a position in the run: just past every event at the boundary's instant, so a
        # phase end and the next phase start recorded at the same time are one boundary, and playing on
        # from it publishes nothing that was already "at" the boundary.
        self._boundaries = sorted({reader.index_at(reader.times[i]) for i in reader.indices_of(*PHASE_TYPES)})
        self._starts = sorted({reader.index_at(reader.times[i]) for i in reader.indices_of("phase_start")})
        """The boundaries where a phase starts (where p goes while the replay plays)."""
        self.phase_marks = tuple(self._time_at(b) for b in self._starts)
        """When each phase started (the position bar's marks)."""
        self._landed: tuple[int, float] | None = None
        """The phase start a previous-phase jump while playing last went to (its index), and when."""
        self.run_time = reader.start_time
        self._last_now: float | None = None

    # -- pacing

    @property
    def finished(self) -> bool:
        return self.position >= len(self.reader)

    @property
    def elapsed(self) -> float:
        return self.run_time - self.reader.start_time

    @property
    def duration(self) -> float:
        return self.reader.end_time - self.reader.start_time

    def advance(self, now: float | None = None) -> int:
        """Move the run's clock by the wall time since the last call (times the speed) and publish
        every event due. Returns how many events were published."""
        now = self.clock() if now is None else now
        last, self._last_now = self._last_now, now
        if self.loop and self.finished and not self.paused and last is not None and len(self.reader):
            self.seek_index(0)  # looping: the end plays on from the start
            self._last_now = now
            return 0
        if self.paused or self.finished or last is None:
            return 0
        self.run_time = min(self.run_time + (now - last) * self.speed, self.reader.end_time)
        stop = min(self.reader.index_at(self.run_time), len(self.reader))
        return self._publish_until(stop)

    def _publish_until(self, stop: int) -> int:
        n = 0
        while self.position < stop:
            event = self.reader.decoded(self.position)
            self.position += 1
            if event is None:
                continue
            self.session.publish(event)
            n += 1
        if self.finished:
            self.run_time = self.reader.end_time  # a fast tick overshoots the end: the run ends there
        return n

    # -- controls

    def toggle_pause(self) -> bool:
        self.paused = not self.paused
        self._last_now = None
        return self.paused

    def set_speed(self, speed: float) -> float:
        self.speed = min(max(speed, SPEEDS[0]), SPEEDS[-1])
        return self.speed

    def faster(self) -> float:
        return self.set_speed(self.speed * 2)

    def slower(self) -> float:
        return self.set_speed(self.speed / 2)

    def step(self) -> int:
        """Publish exactly the next event and pause there."""
        self.paused = True
        if self.finished:
            return 0
        self.run_time = self.reader.times[self.position]
        return self._publish_until(self.position + 1)

    def step_back(self) -> int:
        """Go back exactly one event (the state as it was before it) and pause there; 0 at the start."""
        self.paused = True
        if self.position == 0:
            return 0
        self.seek_index(self.position - 1)
        return 1

    def seek_by(self, seconds: float) -> None:
        """Move the run's clock by ``seconds`` (negative: back), within the run."""
        t = self.run_time + seconds
        if t < self.reader.start_time or (seconds < 0 and t <= self.reader.start_time):
            self.seek_index(0)
        else:
            self.seek_time(min(t, self.reader.end_time))

    def toggle_loop(self) -> bool:
        self.loop = not self.loop
        return self.loop

    def seek_index(self, position: int) -> None:
        position = max(0, min(position, len(self.reader)))
        self.session.state = state_at(self.reader, position, _index=self._index, checkpoints=self._checkpoints)
        self.session.version += 1
        self.position = position
        self.run_time = self.reader.times[position - 1] if position else self.reader.start_time
        self._last_now = None

    def seek_time(self, t: float) -> None:
        """Go to run time ``t``: every event up to it published, the clock at ``t`` (within the run)."""
        self.seek_index(self.reader.index_at(t))
        if self.position < len(self.reader):
            self.run_time = max(self.run_time, min(t, self.reader.end_time))

    def next_phase(self) -> bool:
        """Jump just past the next phase boundary; False when there is none."""
        k = bisect.bisect_right(self._boundaries, self.position)
        if k >= len(self._boundaries):
            return False
        self.seek_index(self._boundaries[k])
        return True

    def prev_phase(self) -> bool:
        """Jump just past the previous phase boundary (or to the start). Playing, to a phase's start: the
        one before the phase now playing when that began less than PREV_GRACE_S (of wall time at this speed)
        ago, or when p landed on it less than PREV_GRACE_S ago; so pressed again and again, p goes back a
        phase each time (the run plays on past the start it landed on)."""
        if self.paused:
            k = bisect.bisect_left(self._boundaries, self.position) - 1
            target = self._boundaries[k] if k >= 0 else None
        else:
            starts = self._starts
            k = bisect.bisect_left(starts, self.position) - 1
            landed = self._landed
            if landed is not None and k >= landed[0] and self.clock() - landed[1] < PREV_GRACE_S:
                k = landed[0] - 1
            elif k >= 0 and self.run_time - self._time_at(starts[k]) < PREV_GRACE_S * self.speed:
                k -= 1
            target = starts[k] if k >= 0 else None
            self._landed = (k, self.clock()) if k >= 0 else None
        if target is None:
            if self.position == 0:
                return False
            self.seek_index(0)
            return True
        self.seek_index(target)
        return True

    def _time_at(self, position: int) -> float:
        return self.reader.times[position - 1] if position else self.reader.start_time

    def to_end(self) -> None:
        self.seek_index(len(self.reader))
