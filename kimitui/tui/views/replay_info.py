"""What the header shows about a replay, read off the player (a plain value, so views stay pure)."""

from __future__ import annotations

from dataclasses import dataclass

from kimitui.core.replay import Player


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
        )

    def key(self) -> tuple[object, ...]:
        """What changes the header: the clock to the tenth of a second and the controls."""
        return (round(self.elapsed, 1), self.speed, self.paused, self.finished, self.position, self.loop)
