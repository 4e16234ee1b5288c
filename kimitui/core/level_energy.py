"""Each serving level's GPU energy, from the power samples recorded while it ran (issue 38 item 3).

The fold meters a level from its progress saying it runs (stage ``run``) to its point: the GPUs the service runs
on are those a CUDA process held memory on in the first sample of the level (the engine's workers; a GPU no
process holds is not the service's), and their summed ``power_w`` is integrated over the samples (trapezoids).
A level's figures follow from its mean power: output tokens per joule is output tok/s over watts, and joules per
request the mean power times the level's duration over its completed requests. Where no sample with the power of
every such GPU came during the level (a plain URL with no host, a driver that does not give power) there is no
figure, and the surfaces say why instead of a number.
"""

from __future__ import annotations

from dataclasses import dataclass

from kimitui.core.events import HostSample

NO_POWER = "no GPU power recorded during the level (a URL without its host, or a driver that gives none)"


@dataclass(frozen=True, slots=True)
class LevelEnergy:
    """One level's GPU energy: the service's GPUs, their mean summed power over the level, and over what."""

    gpus: tuple[int, ...]
    mean_w: float
    seconds: float
    samples: int

    def tokens_per_joule(self, output_tok_s: float | None) -> float | None:
        return output_tok_s / self.mean_w if output_tok_s is not None and self.mean_w > 0 else None

    def joules_per_request(self, duration_s: float | None, completed: int | None) -> float | None:
        return self.mean_w * duration_s / completed if duration_s and completed else None


@dataclass(slots=True)
class EnergyMeter:
    """A level being metered (the fold's, while its stage is ``run``)."""

    concurrency: float
    """The level's place on its sweep's axis (a concurrency, or a request rate: ``MacroProgress.key``)."""
    gpus: tuple[int, ...] = ()
    first: float | None = None
    last: tuple[float, float] | None = None
    """(time, summed watts) of the latest sample."""
    joules: float = 0.0
    samples: int = 0

    def sample(self, ev: HostSample) -> None:
        if not self.gpus:
            self.gpus = tuple(sorted({i for p in ev.procs if p.kind == "cuda" for i, mib in p.gpu_mem_mib.items()
                                      if mib > 0}))
        power = {g.index: g.power_w for g in ev.gpus}
        watts = [power.get(i) for i in self.gpus]
        if not self.gpus or any(w is None for w in watts):
            return
        total = float(sum(w for w in watts if w is not None))
        if self.last is not None:
            if ev.t <= self.last[0]:
                return
            self.joules += (self.last[1] + total) / 2 * (ev.t - self.last[0])
        else:
            self.first = ev.t
        self.last = (ev.t, total)
        self.samples += 1

    def result(self) -> LevelEnergy | None:
        """The level's energy; None with fewer than two samples of its GPUs' power."""
        if self.last is None or self.first is None or self.samples < 2:
            return None
        seconds = self.last[0] - self.first
        return LevelEnergy(self.gpus, self.joules / seconds, seconds, self.samples) if seconds > 0 else None
