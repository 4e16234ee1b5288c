"""Events are values: frozen dataclasses, decoded with every field checked against its annotation
(kimitui.core.typed), so a line of the wrong shape is refused with the event type and field named."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from kimitui.core.events import (
    EVENT_TYPES,
    EventDecodeError,
    GemmRow,
    GpuSample,
    HostSample,
    ProcSample,
    base,
    campaign,
    cleanup,
    decode,
    encode,
    fleet,
    from_dict,
    host,
    macro,
    micro,
    phase,
)
from kimitui.core.runfile import RunReader
from kimitui.core.typed import FieldTypeError, build
from kimitui.resources import bundled_runs

GPU = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA H200"}


def _error(cls: type, data: dict) -> str:
    with pytest.raises(FieldTypeError) as info:
        build(cls, data)
    return str(info.value)


def _records() -> list[type]:
    """Every dataclass the events modules declare: the events and the records inside them."""
    return [v for mod in (base, host, phase, cleanup, macro, micro, campaign, fleet) for v in vars(mod).values()
            if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == mod.__name__]


def test_every_event_and_every_record_inside_one_is_frozen() -> None:
    records = _records()
    assert set(EVENT_TYPES.values()) <= set(records) and {GpuSample, ProcSample} <= set(records)
    assert [c.__name__ for c in records if not c.__dataclass_params__.frozen] == []
    for name, cls in EVENT_TYPES.items():
        ev = from_dict({"t": 1.0, "type": name})
        with pytest.raises(dataclasses.FrozenInstanceError):
            ev.t = 2.0  # type: ignore[misc]
        assert dataclasses.replace(ev, t=2.0).t == 2.0 and ev.t == 1.0, cls
    gpu = build(GpuSample, GPU)
    with pytest.raises(dataclasses.FrozenInstanceError):
        gpu.mem_used_mib = 1.0  # type: ignore[misc]


def test_every_event_of_the_bundled_runs_decodes_and_round_trips() -> None:
    for path in bundled_runs():
        reader = RunReader(path)
        evs = list(reader.events())
        assert len(evs) == len(reader) > 100 and reader.warnings == []
        assert [decode(encode(ev)) for ev in evs] == evs


def test_scalars_are_checked_bool_and_int_apart() -> None:
    assert _error(GpuSample, {**GPU, "index": True}) == "field 'index' is bool, expected int"
    assert _error(GpuSample, {**GPU, "index": 1.0}) == "field 'index' is float, expected int"
    assert _error(GpuSample, {**GPU, "mem_used_mib": "900"}) == "field 'mem_used_mib' is str, expected float | None"
    assert _error(GpuSample, {**GPU, "mem_used_mib": False}) == "field 'mem_used_mib' is bool, expected float | None"
    assert _error(ProcSample, {"pid": 1, "visible": 1}) == "field 'visible' is int, expected bool"
    assert _error(GpuSample, {**GPU, "name": None}) == "field 'name' is null, expected str"
    g = build(GpuSample, {**GPU, "mem_used_mib": 900, "temp_c": None})
    assert g.mem_used_mib == 900.0 and type(g.mem_used_mib) is float and g.temp_c is None


def test_numbers_a_float_cannot_hold_and_non_finite_floats_are_refused_unless_the_field_says() -> None:
    assert build(GpuSample, {**GPU, "index": 2**70}).index == 2**70  # a large int is still an int
    assert "out of range" in _error(GpuSample, {**GPU, "index": 10**400})
    assert "out of range" in _error(GpuSample, {**GPU, "mem_used_mib": 10**400})
    assert _error(GpuSample, {**GPU, "power_w": math.nan}) == "field 'power_w' is nan, expected a finite float"
    assert _error(GpuSample, {**GPU, "power_w": -math.inf}) == "field 'power_w' is -inf, expected a finite float"
    assert build(GpuSample, {**GPU, "power_w": 1e308}).power_w == 1e308
    # a kernel whose output is NaN has a NaN relative error: the row says so, it is not lost
    row = from_dict({"t": 1.0, "type": "gemm_row", "rel_err": math.nan, "correct": False})
    assert isinstance(row, GemmRow) and math.isnan(row.rel_err or 0.0)
    with pytest.raises(EventDecodeError, match="field 'time_us' is inf"):
        from_dict({"t": 1.0, "type": "gemm_row", "time_us": math.inf})


def test_containers_literals_and_nested_records_name_the_path() -> None:
    sample = {"t": 1.0, "type": "sample", "gpus": [GPU, {**GPU, "index": 1, "mem_used_mib": "x"}]}
    with pytest.raises(EventDecodeError) as info:
        from_dict(sample)
    assert str(info.value) == "bad sample event: field 'gpus[1].mem_used_mib' is str, expected float | None"
    with pytest.raises(EventDecodeError, match=r"field 'gpus\[0\]' is str, expected a GpuSample object"):
        from_dict({**sample, "gpus": ["GPU-0"]})
    assert _error(ProcSample, {"pid": 1, "gpus": "0,1"}) == "field 'gpus' is str, expected list[int]"
    assert _error(ProcSample, {"pid": 1, "gpus": [0, "1"]}) == "field 'gpus[1]' is str, expected int"
    assert _error(ProcSample, {"pid": 1, "kind": "gpu"}) == (
        "field 'kind' is 'gpu', expected one of 'cuda', 'handle', 'exiting', 'exited', 'unknown'")
    assert _error(ProcSample, {"pid": 1, "kind": ["cuda"]}).startswith("field 'kind' is ['cuda'], expected one of")


def test_the_gpu_memory_map_is_keyed_by_integer_gpu_index() -> None:
    p = build(ProcSample, {"pid": 1, "gpu_mem_mib": {"0": 8148.0, "7": 12}})
    assert p.gpu_mem_mib == {0: 8148.0, 7: 12.0}
    assert _error(ProcSample, {"pid": 1, "gpu_mem_mib": {"x": 1.0}}) == (
        "field 'gpu_mem_mib' has key 'x', expected an index >= 0")
    assert _error(ProcSample, {"pid": 1, "gpu_mem_mib": {"\u0661": 1.0}}).endswith("an index >= 0")  # Arabic 1
    assert _error(ProcSample, {"pid": 1, "gpu_mem_mib": {"-1": 1.0}}).endswith("an index >= 0")  # no GPU -1
    assert _error(ProcSample, {"pid": 1, "gpu_mem_mib": {"0": "1"}}) == "field 'gpu_mem_mib[0]' is str, expected float"
    assert _error(ProcSample, {"pid": 1, "gpu_mem_mib": [1.0]}) == (
        "field 'gpu_mem_mib' is list, expected dict[int, float]")


def test_missing_required_fields_unknown_keys_and_strings() -> None:
    assert _error(GpuSample, {"uuid": "u", "name": "n"}) == "field 'index' is missing"
    with pytest.raises(EventDecodeError, match="bad log event: field 't' is missing"):
        from_dict({"type": "log"})
    assert build(GpuSample, {**GPU, "from_a_newer_writer": [1]}) == GpuSample(0, "GPU-0", "NVIDIA H200")
    rtl = "\u202ekill \U0001f389 \x1b[31m"
    assert build(GpuSample, {**GPU, "name": rtl}).name == rtl
    # JSON's \ud800 escape makes a string no UTF-8 output can write
    bad = json.loads('{"index": 0, "uuid": "u", "name": "\\ud800"}')
    assert _error(GpuSample, bad) == "field 'name' is not valid Unicode (a lone surrogate)"


@pytest.mark.parametrize(("line", "reason"), [
    ('{"t":1,"type":["sample"]}', "unknown or missing event type ['sample']"),
    ('{"t":1,"type":"no_such"}', "unknown or missing event type 'no_such'"),
    ('{"t":1,"type":"log","message":' + "9" * 5000 + "}", "not readable JSON: Exceeds the limit"),
    ('{"t":1,"type":"log","x":' + "[" * 100_000 + "]" * 100_000 + "}", "not readable JSON: nested too deep"),
    (b'{"t":1,"type":"log","message":"\xff"}', "not UTF-8 at byte"),
    ("[1, 2]", "not a JSON object"),
])
def test_a_line_that_is_no_event_is_one_clear_error(line: str | bytes, reason: str) -> None:
    with pytest.raises(EventDecodeError) as info:
        decode(line)
    assert str(info.value).startswith(reason) and "\n" not in str(info.value)


def test_the_live_path_keeps_an_event_a_value() -> None:
    """The agent's sample gets the host name and the local clock as new events, not by changing them."""
    from kimitui.hosts.telemetry import parse_agent_line

    line = json.dumps({"t": 5.0, "type": "sample", "seq": 1, "gpus": [GPU], "procs": []})
    ev = parse_agent_line(line, host="box")
    assert isinstance(ev, HostSample) and ev.host == "box" and ev.gpus == [GpuSample(0, "GPU-0", "NVIDIA H200")]
    bad = parse_agent_line(json.dumps({"t": 5.0, "type": "sample", "seq": 1, "gpus": [{**GPU, "temp_c": "hot"}],
                                       "procs": []}), host="box")
    assert not isinstance(bad, HostSample) and "temp_c" in bad.message


def test_the_registry_holds_every_event_each_module_declares_and_no_other() -> None:
    """The registry reads each module's EVENTS (nothing registers itself by being imported): every Event
    subclass of the vocabulary is declared, once, under its own name."""
    from kimitui.core.events.base import Event

    declared = [cls for mod in (host, phase, cleanup, macro, micro, campaign, fleet) for cls in mod.EVENTS]
    defined = [v for mod in (host, phase, cleanup, macro, micro, campaign, fleet) for v in vars(mod).values()
               if isinstance(v, type) and issubclass(v, Event) and v is not Event and v.__module__ == mod.__name__]
    assert sorted(c.__name__ for c in declared) == sorted(c.__name__ for c in defined)
    assert {cls.type: cls for cls in declared} == EVENT_TYPES and len(EVENT_TYPES) == len(declared)
