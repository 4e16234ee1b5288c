"""The macro benchmark: a streaming load generator for OpenAI-compatible servers, with vLLM's metrics.

Entry point: ``run_sweep(config, publish, progress=None, cancel=None) -> SweepResult``.
"""

from kimitui.bench.macro.config import SLO, ConfigError, MacroConfig, RampUp, Timeouts
from kimitui.bench.macro.level import LevelProgress
from kimitui.bench.macro.sweep import (
    LevelResult,
    MacroError,
    SweepResult,
    discover_model,
    run_sweep,
)

__all__ = [
    "SLO",
    "ConfigError",
    "LevelProgress",
    "LevelResult",
    "MacroConfig",
    "MacroError",
    "RampUp",
    "SweepResult",
    "Timeouts",
    "discover_model",
    "run_sweep",
]
