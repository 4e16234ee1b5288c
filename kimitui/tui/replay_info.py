"""What the header shows about a replay, read off the player (a plain value, so views stay pure)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from kimitui.core.events import PhaseStart
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader


@lru_cache(maxsize=4)
def phase_names(reader: RunReader) -> tuple[str, ...]:
    """The phases the run holds, each once, in order of their first start."""
    names: dict[str, None] = {}
    for i in reader.indices_of("phase_start"):
        event = reader.decoded(i)
        if isinstance(event, PhaseStart):
            names[event.phase] = None
    return tuple(names)


@dataclass(frozen=True, slots=True)
class ReplayInfo:
    run_time: float
    elapsed: float
    duration: float
    speed: float
    paused: bool
    finished: bool
    position: int
    total: int
    start: float = 0.0
    marks: tuple[float, ...] = ()
    """When each phase started (run times): the position bar's marks."""
    loop: bool = False
    phases: tuple[str, ...] = ()
    """The phases of the run (the header keeps room for the longest)."""

    @classmethod
    def of(cls, player: Player) -> ReplayInfo:
        return cls(
            run_time=player.run_time,
            elapsed=player.elapsed,
            duration=player.duration,
            speed=player.speed,
            paused=player.paused,
            finished=player.finished,
            position=player.position,
            total=len(player.reader),
            start=player.reader.start_time,
            marks=player.phase_marks,
            loop=player.loop,
            phases=phase_names(player.reader),
        )

    def key(self) -> tuple[object, ...]:
        """What changes the header: the clock to the tenth of a second and the controls."""
        return (round(self.elapsed, 1), self.speed, self.paused, self.finished, self.position, self.loop)
