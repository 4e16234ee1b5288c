"""The agent's parsers and classifiers on the real 2 x H200 captures (tests/fixtures/h200x2)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kimitui.hostside import gpu, holders, nvml, procfs, smi
from tests.fake_nvml import CAPTURED_FIELDS, FakeNvml
from tests.support import FIXTURES

UUID0 = "GPU-08163954-12d0-d1cc-c80c-d7eb06938ec1"
UUID1 = "GPU-0436a9ca-5731-3f2f-6023-146e7add34f1"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def fd_targets(listing: str) -> list[str]:
    """Link targets of an `ls -l /proc/PID/fd` capture."""
    return [line.split(" -> ", 1)[1].strip() for line in listing.splitlines() if " -> " in line]


# --- nvidia-smi CSV -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,power", [("query-gpu.csv", 115.70), ("query-gpu-nounits.csv", 115.72)])
def test_query_gpu_with_and_without_units(name: str, power: float) -> None:
    gpus = smi.parse_query_gpu(fixture(name), CAPTURED_FIELDS)
    assert [g["index"] for g in gpus] == [0, 1]  # the header line (with units) is not a row
    g0 = gpus[0]
    assert (g0["uuid"], g0["name"]) == (UUID0, "NVIDIA H200")
    assert (g0["mem_used_mib"], g0["mem_total_mib"], g0["mem_reserved_mib"]) == (8157, 143771, 616)
    assert (g0["util_pct"], g0["temp_c"], g0["power_w"], g0["sm_clock_mhz"]) == (0, 33, power, 1980)
    assert gpus[1]["mem_used_mib"] == 4343 and gpus[1]["uuid"] == UUID1
    assert set(g0) == set(gpu.new_gpu(0, "", ""))  # the GpuSample shape, nothing else (no fan)


@pytest.mark.parametrize("name", ["query-apps.csv", "query-apps-nounits.csv"])
def test_query_apps(name: str) -> None:
    assert smi.parse_query_apps(fixture(name)) == [(557, 8148.0, UUID0), (557, 4334.0, UUID1)]


def test_csv_cells() -> None:
    assert [smi.csv_number(c) for c in (" 8157 MiB", "115.70 W", "[N/A]", "N/A", "[Not Supported]", "")] == [
        8157.0, 115.70, None, None, None, None]


# --- /proc ----------------------------------------------------------------------------------------------

def test_stat_status_cgroup_cmdline_of_the_holder() -> None:
    st = procfs.parse_stat(fixture("holder-stat.txt"))
    assert (st.pid, st.comm, st.state, st.ppid, st.start_time) == (557, "python3", "S", 554, 2637)
    odd = procfs.parse_stat("42 (a) b (c)) R 7 3 5 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 999 0 0")
    assert odd == (42, "a) b (c)", "R", 7, 3, 5, 999, 0, 0, -1, 0)  # comm may hold ") (": split at the last ")"
    assert procfs.parse_status_uid(fixture("holder-status.txt")) == 0
    assert procfs.parse_cgroup(fixture("holder-cgroup.txt")) == (None, "3f40fbd2217a529a6eec9460b727a71a")
    cmd = procfs.parse_cmdline((FIXTURES / "holder-cmdline.txt").read_bytes())
    assert cmd.startswith("python3 -c import torch,time;") and "\0" not in cmd  # captured with NUL -> space
    assert procfs.parse_cmdline(b"python3\0-c\0import torch\0") == "python3 -c import torch"


@pytest.mark.parametrize("text,expected", [
    ("0::/system.slice/vllm.service\n", ("vllm.service", None)),
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/serve.service\n", ("serve.service", None)),
    ("0::/system.slice/docker-" + "ab" * 32 + ".scope\n", (None, "ab" * 32)),
    ("12:pids:/docker/" + "cd" * 32 + "\n1:name=systemd:/docker/" + "cd" * 32 + "\n", (None, "cd" * 32)),
    ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice/cri-containerd-"
     + "ef" * 32 + ".scope\n", (None, "ef" * 32)),
    ("3:cpu:/kubepods/burstable/pod1234/" + "12" * 32 + "\n", (None, "12" * 32)),
    ("0::/user.slice/user-0.slice/session-3.scope\n", (None, None)),
])
def test_cgroup_unit_or_container(text: str, expected: tuple[str | None, str | None]) -> None:
    assert procfs.parse_cgroup(text) == expected


def test_holder_maps_the_devices_and_the_nvml_monitor_only_opens_them() -> None:
    prefix = "/dev/nvidia"
    holder_maps, monitor_maps = fixture("holder-maps-nvidia.txt"), fixture("nvmlonly-maps-nvidia.txt")
    assert holders.maps_device_paths(holder_maps, prefix) == {
        "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"}
    assert holders.maps_device_paths(monitor_maps, prefix) == set()  # libcuda / libnvidia-ml are not devices
    assert holders.classify_holding(fd_targets(fixture("holder-fd.txt")), holder_maps, prefix) == ("cuda", [0, 1])
    assert holders.classify_holding(fd_targets(fixture("nvmlonly-fd.txt")), monitor_maps, prefix) == (
        "handle", [0, 1])
    assert holders.classify_holding(["/dev/null", "pipe:[1]"], "", prefix) == (None, [])


def test_classes_agree_with_fuser() -> None:
    """fuser -v shows ACCESS F...m for a mapping process and F.... for an opener: the same two classes."""
    access = {}
    for line in fixture("fuser-v.txt").splitlines()[1:]:
        parts = line.split()
        pid_at = 2 if parts[0].startswith("/dev/") else 1
        access[int(parts[pid_at])] = parts[pid_at + 1]
    ours = {557: holders.classify_holding(fd_targets(fixture("holder-fd.txt")),
                                        fixture("holder-maps-nvidia.txt"), "/dev/nvidia")[0],
            558: holders.classify_holding(fd_targets(fixture("nvmlonly-fd.txt")),
                                        fixture("nvmlonly-maps-nvidia.txt"), "/dev/nvidia")[0]}
    assert {pid: "cuda" if a.endswith("m") else "handle" for pid, a in access.items()} == ours


def fake_proc_root(root: Path) -> Path:
    """A /proc with the two captured processes: 557 (torch holder) and 558 (NVML-only monitor)."""
    for pid, fd_name, maps_name in ((557, "holder-fd.txt", "holder-maps-nvidia.txt"),
                                    (558, "nvmlonly-fd.txt", "nvmlonly-maps-nvidia.txt")):
        d = root / str(pid)
        (d / "fd").mkdir(parents=True)
        for n, target in enumerate(fd_targets(fixture(fd_name))):
            os.symlink(target, d / "fd" / str(n))
        (d / "maps").write_text(fixture(maps_name))
        stat = fixture("holder-stat.txt").replace("557 (python3)", f"{pid} (python3)", 1)
        (d / "stat").write_text(stat)
        (d / "status").write_text(fixture("holder-status.txt"))
        (d / "cgroup").write_text(fixture("holder-cgroup.txt"))
        (d / "cmdline").write_bytes((FIXTURES / "holder-cmdline.txt").read_bytes())
        (d / "exe").symlink_to("/usr/bin/python3.12")  # a dangling link reads all the same
    return root


def test_proc_pipeline_on_the_captured_processes(tmp_path: Path) -> None:
    root = fake_proc_root(tmp_path / "proc")
    scan = holders.HolderScan(str(root), "/dev/nvidia", skip=set(), every=2.0)
    held = scan.update(0.0, set())
    assert held == {557: ("cuda", [0, 1], True), 558: ("handle", [0, 1], True)}
    mem = {557: {0: 8148.0, 1: 4334.0}, 4242: {0: 512.0}}  # 4242: a host pid this view cannot see
    procs = {p["pid"]: p for p in holders.build_procs(mem, held, holders.ProcDetails(str(root)), skip=set())}
    h = procs[557]
    assert (h["kind"], h["gpus"], h["gpu_mem_mib"], h["flags"]) == ("cuda", [0, 1], {"0": 8148.0, "1": 4334.0}, [])
    assert (h["user"], h["start_time"], h["ppid"], h["state"]) == ("root", 2637, 554, "S")
    assert h["container"] == "3f40fbd2217a529a6eec9460b727a71a" and h["unit"] is None
    assert h["cmdline"].startswith("python3 -c import torch")
    assert (procs[558]["kind"], procs[558]["gpu_mem_mib"], procs[558]["flags"]) == ("handle", {}, [])
    ghost = procs[4242]
    assert (ghost["visible"], ghost["kind"], ghost["flags"], ghost["gpu_mem_mib"]) == (
        False, "unknown", ["pid-not-visible"], {"0": 512.0})
    assert set(h) == set(ghost) == {"pid", "start_time", "user", "gpu_mem_mib", "kind", "unit", "container",
                                    "cmdline", "state", "ppid", "gpus", "visible", "flags", "exe"}
    assert h["exe"] == "/usr/bin/python3.12" and ghost["exe"] is None
    # the agent itself never lists itself as a holder
    assert 558 not in holders.HolderScan(str(root), "/dev/nvidia", skip={558}, every=2.0).update(0.0, set())


# --- NVML, through a fake pynvml that answers with the captured figures ------------------------------------

def smi_gpu(index: int) -> dict[str, Any]:
    return smi.parse_query_gpu(fixture("query-gpu-nounits.csv"), CAPTURED_FIELDS)[index]


def test_nvml_memory_matches_nvidia_smi_not_v1_used() -> None:
    src = nvml.NvmlSource(FakeNvml())
    assert src.driver == "580.159.04"
    gpus, procs = src.sample()
    g0 = gpus[0]
    # NVML v1 used = 9197977600 B = 8771.8 MiB includes the 616 MiB reserved; nvidia-smi shows 8157
    assert abs(g0["mem_used_mib"] - smi_gpu(0)["mem_used_mib"]) < 2
    assert abs(gpus[1]["mem_used_mib"] - smi_gpu(1)["mem_used_mib"]) < 2
    assert (g0["mem_reserved_mib"], g0["mem_total_mib"]) == (616.0, smi_gpu(0)["mem_total_mib"])
    assert (g0["temp_c"], g0["power_w"], g0["sm_clock_mhz"], g0["util_pct"]) == (33.0, 115.383, 1980.0, 0.0)
    assert g0["error"] is None and g0["uuid"] == UUID0
    assert procs == {557: {0: 8148.0, 1: 4334.0}}  # = nvidia-smi --query-compute-apps, exactly


def test_nvml_v1_only_reports_used_with_reserved_inside() -> None:
    gpus, _ = nvml.NvmlSource(FakeNvml(v2=False)).sample()
    assert round(gpus[0]["mem_used_mib"], 1) == round(9197977600 / 1048576, 1) == 8771.9
    assert gpus[0]["mem_reserved_mib"] is None


def test_nvml_fields_fail_on_their_own_and_a_lost_gpu_does_not_stop_the_rest() -> None:
    fake = FakeNvml(no_util=True)
    src = nvml.NvmlSource(fake)
    fake.lost = {1}  # falls off the bus after init
    gpus, procs = src.sample()
    assert gpus[0]["util_pct"] is None and gpus[0]["temp_c"] == 33.0 and gpus[0]["error"] is None
    lost = gpus[1]
    assert lost["error"] == "NVMLError: GPU is lost" and lost["uuid"] == UUID1
    assert all(lost[k] is None for k in ("mem_used_mib", "mem_total_mib", "util_pct", "temp_c", "power_w"))
    assert procs == {557: {0: 8148.0}}
    fake.lost = set()  # back (after a reset): the next sample reads it again
    assert src.sample()[0][1]["error"] is None


def test_nvml_gpu_lost_at_init_is_listed_with_its_error() -> None:
    gpus, _ = nvml.NvmlSource(FakeNvml(lost={0})).sample()
    assert gpus[0]["error"] == "NVMLError: GPU is lost" and gpus[0]["mem_used_mib"] is None
    assert gpus[1]["mem_used_mib"] is not None
