"""A sample's memory points (its time, and each GPU's index and MiB used) read from its line without decoding
its (much larger) process list: what a replay's seek takes from the older samples it does not fold whole, and
what a chunked run's index keeps for every sample."""

from __future__ import annotations

import json

from kimitui.core.typed import compile_type

_TIME, _ = compile_type(float)
_INDEX, _ = compile_type(int)
_MIB, _ = compile_type(float | None)
"""The checks of the fields a sample's memory history reads (``HostSample.t``, ``GpuSample.index`` and
``mem_used_mib``), without building its GPUs: a seek reads hundreds of samples."""


_DECODER = json.JSONDecoder()
_GPUS_KEY = '"gpus":'


def _sample_head(raw: bytes) -> dict:
    """A sample's ``t`` and ``gpus`` without decoding its (much larger) process list: the GPU array is
    parsed alone where the line has the writer's key order (t, type, host, seq, gpus, procs);
    anything else is decoded whole."""
    text = raw.decode()
    k = text.find(_GPUS_KEY)
    pk = text.find('"procs":')
    if k > 0 and (pk < 0 or k < pk):
        try:
            gpus, _ = _DECODER.raw_decode(text, k + len(_GPUS_KEY))
            head = json.loads(text[:k].rstrip(",") + "}")
        except ValueError:
            return json.loads(text)
        if isinstance(gpus, list) and all(isinstance(g, dict) for g in gpus) and isinstance(head, dict) \
                and "t" in head:
            head["gpus"] = gpus
            return head
    return json.loads(text)


MEMORY_ERRORS = (ValueError, LookupError, TypeError, AttributeError, RecursionError)
"""What ``line_memory`` raises for a line whose memory points cannot be read."""


def line_memory(raw: bytes) -> tuple[float, list[tuple[int, float | None]]]:
    """A sample line's time and (GPU index, MiB used) points, its fields checked as the event's types."""
    data = _sample_head(raw)
    return _TIME(data["t"]), [(_INDEX(g["index"]), _MIB(g.get("mem_used_mib"))) for g in data.get("gpus", ())]
