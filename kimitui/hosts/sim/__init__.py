"""The simulated GPU host (the embedded default): see ``host.SimHost`` and the design notes (DESIGN.md).

Holder processes import the submodules they need directly; the public names below load on first use so
that ``python -m kimitui.hosts.sim.worker`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kimitui.hosts.sim.batching import BatchingModel
    from kimitui.hosts.sim.host import SimHost
    from kimitui.hosts.sim.openai_server import FaultPlan, SimOpenAIServer

__all__ = ["BatchingModel", "FaultPlan", "SimHost", "SimOpenAIServer"]

_WHERE = {"SimHost": "host", "BatchingModel": "batching", "FaultPlan": "openai_server",
          "SimOpenAIServer": "openai_server"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"kimitui.hosts.sim.{_WHERE[name]}"), name)
    raise AttributeError(name)
