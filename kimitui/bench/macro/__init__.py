"""The macro benchmark: a streaming load generator for OpenAI-compatible servers, with vLLM's metrics.

Entry point: ``run_sweep(config, publish, progress=None, cancel=None) -> SweepResult`` (no phase of its own:
the macro phase is ``kimitui.phases.macro.macro_phase``).
"""

from kimitui.bench.macro.config import SLO, ConfigError, MacroConfig, RampUp, Timeouts
from kimitui.bench.macro.level import LevelProgress
from kimitui.bench.macro.sweep import (
    MacroError,
    SweepLevel,
    SweepPlan,
    SweepResult,
    discover_model,
    prepare_sweep,
    run_plan,
    run_sweep,
    sweep_note,
)

__all__ = [
    "SLO",
    "ConfigError",
    "LevelProgress",
    "MacroConfig",
    "MacroError",
    "RampUp",
    "SweepLevel",
    "SweepPlan",
    "SweepResult",
    "Timeouts",
    "discover_model",
    "prepare_sweep",
    "run_plan",
    "run_sweep",
    "sweep_note",
]
