"""The GPU source a request names: NVML, else nvidia-smi's CSV, else (``sim_dir``) the simulated driver."""

from __future__ import annotations

import os

from .gpu import NoDriver
from .nvml import NvmlSource
from .procfs import StatReader
from .simdriver import SimSource
from .smi import SmiSource

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any


SOURCE_FIELDS = ("sim_dir", "dev_prefix", "proc_root", "nvidia_smi", "no_nvml")


def source_config(req: dict[str, Any]) -> dict[str, Any]:
    cfg = {"sim_dir": req.get("sim_dir"), "dev_prefix": req.get("dev_prefix"),
           "proc_root": req.get("proc_root") or "/proc", "nvidia_smi": req.get("nvidia_smi") or "nvidia-smi",
           "no_nvml": bool(req.get("no_nvml"))}
    if cfg["dev_prefix"] is None:
        cfg["dev_prefix"] = os.path.join(cfg["sim_dir"], "dev", "nvidia") if cfg["sim_dir"] else "/dev/nvidia"
    return cfg


def open_source(cfg: dict[str, Any]) -> Any:
    if cfg["sim_dir"]:
        return SimSource(cfg["sim_dir"], StatReader(cfg["proc_root"]))
    reasons = []
    if not cfg["no_nvml"]:
        try:
            src = NvmlSource()
            if src.handles:
                return src
            reasons.append("NVML: 0 GPUs")
        except NoDriver as exc:
            reasons.append(f"NVML: {exc}")
    else:
        reasons.append("NVML: disabled")
    try:
        return SmiSource(cfg["nvidia_smi"])
    except NoDriver as exc:
        reasons.append(f"nvidia-smi: {exc}")
    raise NoDriver("no NVIDIA driver on this host ({})".format(", ".join(reasons)))


def source_info(source: Any) -> dict[str, Any]:
    gpus = len(getattr(source, "handles", None) or getattr(source, "spec", None) or []) or getattr(
        source, "count", 0)
    return {"source": source.name, "driver": source.driver, "gpus": gpus}

