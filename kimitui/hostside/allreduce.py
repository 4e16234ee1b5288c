"""kimitui's all-reduce micro-benchmark worker: one launcher, one process per GPU (rank), on the GPU host.

Sent with worker_start as one payload with the hostside modules it imports (stdlib; torch inside the
ranks) and run by the host's python3 (3.8+): kimitui/hosts/bundle.py. The launcher stays stdlib-only and
forks the ranks before any of them imports torch (so no CUDA state is ever forked); they meet through a
FileStore in a temporary folder. Cancel: SIGTERM to the launcher's process group ends every rank (the host
program does, on cancel and when its caller goes away); the launcher also ends them when it is signalled
alone or a rank fails; each rank dies with the launcher (PR_SET_PDEATHSIG).

JSON lines on stdout (rank 0 reports; any rank reports its own error):
  hello {part, pid, python, ranks, simulated}
  env {torch, device, backends, ranks, notes}
  progress {item, done, total}
  row {size_bytes, count, dtype, ranks, tokens, mode, burst, time_us, burst_us, algbw_gbps, busbw_gbps, wrong,
       throttle, sm_clock_mhz (on CUDA where NVML answers: the caps any rank's GPU met, the lowest SM clock)}
  log {level, message}, error {message}, done {rows, elapsed_s}

Figures as nccl-tests defines them: algbw = S / t, busbw = algbw * 2(n-1)/n; #wrong counts elements of
a reduction of ones that are not n. Modes: eager (one call at a time, CUDA events around a loop) and
graph (the calls captured in one CUDA graph); the burst: BURST all-reduces of one decode step's M-token
messages captured in one graph (on CPU, gloo: an eager burst).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time

from .clocks import ClockWatch
from .simholder import hold_simulated_memory
from .wire import event, event_log

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
MODELS = {"rtx-pro-6000": {"device": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "latency_us": 24.0,
                           "graph_latency_us": 19.0, "busbw_gbps": 40.0, "link": "PCIe Gen5 x16"}}
SPEEDUP_ENV = "KIMITUI_SIM_ALLREDUCE_SPEEDUP"
"""The simulated host only: its modelled all-reduce this many times faster (a before/after pair to compare;
the simulated server's decode step is shortened by the same saving, kimitui.hosts.sim.batching)."""


def allreduce_speedup() -> float:
    """``SPEEDUP_ENV`` as a number of at least 1 (1: as modelled; anything unreadable is 1)."""
    try:
        k = float(os.environ.get(SPEEDUP_ENV, "") or 1.0)
    except ValueError:
        return 1.0
    return k if k >= 1.0 and k < float("inf") else 1.0


def modelled(name: str) -> dict:
    """The model ``name``, made faster by ``allreduce_speedup()`` (said in its link's words)."""
    model = dict(MODELS[name])
    k = allreduce_speedup()
    if k != 1.0:
        model["latency_us"] /= k
        model["graph_latency_us"] /= k
        model["busbw_gbps"] *= k
        model["link"] += f" (all-reduce {k:g}x faster, {SPEEDUP_ENV})"
    return model


MODELLED_JITTER = (0.985, 1.03)
"""A modelled row's time is ``modelled_us`` times a factor drawn from this range (a run's spread)."""


def modelled_us(model: dict, size: int, mode: str, ranks: int) -> float:
    """One all-reduce of ``size`` bytes over ``ranks`` GPUs on the machine ``model`` (``modelled``'s): the
    small-message latency (eager, or replayed in a CUDA graph) plus the size over the bus bandwidth. The
    simulated host's rows are this times a small jitter, and its serving model's decode step is built from
    the same figure (kimitui.hosts.sim.machine)."""
    lat = model["latency_us"] if mode == "eager" else model["graph_latency_us"]
    return lat + size * bus_factor(ranks) / (model["busbw_gbps"] * 1e9) * 1e6


def sizes_for(args: argparse.Namespace) -> list:
    """[(bytes, tokens or None)]: one decode step's message at each M, then the sweep (x2 per step)."""
    el = DTYPE_BYTES[args.dtype]
    out = [(m * args.hidden * el, m) for m in args.tokens]
    size = args.sweep_min
    while args.sweep_max and size <= args.sweep_max:
        if size % el == 0 and size not in [s for s, _ in out]:
            out.append((size, None))
        size *= 2
    return sorted(out, key=lambda item: item[0])


def bus_factor(n: int) -> float:
    """nccl-tests' all-reduce factor: busbw = algbw * 2(n-1)/n (0 for one rank: nothing crosses a link)."""
    return 2.0 * (n - 1) / n


def row(args: argparse.Namespace, size: int, tokens: object, mode: str, t_us: float, wrong: int,
        burst: int = 1, burst_us: object = None, simulated: bool = False, clocks: object = None) -> dict:
    """One row; CLOCKS: the ranks' clock caps while it was measured (``clocks.GroupWatch.lap``), when known."""
    algbw = size / (t_us * 1e-6) / 1e9 if t_us > 0 else 0.0
    return {**(clocks or {}), "size_bytes": size, "count": size // DTYPE_BYTES[args.dtype], "dtype": args.dtype,
            "ranks": args.ranks, "tokens": tokens, "mode": mode, "burst": burst, "time_us": round(t_us, 3),
            "burst_us": None if burst_us is None else round(burst_us, 3), "algbw_gbps": round(algbw, 4),
            "busbw_gbps": round(algbw * bus_factor(args.ranks), 4), "wrong": wrong, "backend": args.backend,
            "simulated": simulated}


# --- ranks --------------------------------------------------------------------------------------------

def die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def modelled_rank(rank: int, args: argparse.Namespace, release: int) -> int:
    keep = hold_simulated_memory(args.sim_dir, [args.gpus[rank]], args.sim_mib, 35) if args.sim_dir else []
    if rank != 0:
        os.read(release, 1)  # held until the launcher ends the run (or dies)
        del keep
        return 0
    model = modelled(args.modelled)
    rnd = random.Random(args.seed)
    event("env", torch="", device=model["device"] + " (simulated)", ranks=args.ranks, simulated=True,
         backends={"nccl": f"modelled: {args.ranks} ranks over {model['link']}, small messages "
                           f"{model['latency_us']:g} us, busbw {model['busbw_gbps']:g} GB/s (simulated)"},
         notes=["modelled figures, not measured (docs/reference.md section 2: PCIe Gen5 NCCL ~24 us up to 64 KB, "
                "busbw 37-41 GB/s)"])
    sizes = sizes_for(args)
    modes = [m for m in args.modes if m in ("eager", "graph")]
    skip = set(args.skip)
    total = len(sizes) * len(modes) + len(args.burst_tokens) - len(skip)
    done = 0

    def time_us(size: int, mode: str) -> float:
        return modelled_us(model, size, mode, args.ranks) * rnd.uniform(*MODELLED_JITTER)

    for size, tokens in sizes:
        for mode in modes:
            if f"{mode}|{size}" in skip:
                continue
            event("progress", item=f"{size} B {mode}", done=done, total=total)
            if args.pace:
                time.sleep(args.pace)  # a modelled run takes time like a real one: progress is visible
            event("row", **row(args, size, tokens, mode, time_us(size, mode), 0, simulated=True))
            done += 1
    for m in args.burst_tokens:
        if f"burst|{m}" in skip:
            continue
        event("progress", item=f"burst of {args.burst} at M={m}", done=done, total=total)
        if args.pace:
            time.sleep(args.pace)
        size = m * args.hidden * DTYPE_BYTES[args.dtype]
        per = time_us(size, "graph")
        event("row", **row(args, size, m, "graph", per, 0, args.burst, per * args.burst, simulated=True))
        done += 1
    event("done", rows=done, elapsed_s=None)
    return 0


def torch_rank(rank: int, args: argparse.Namespace, store: str) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    cuda = args.backend == "nccl"
    dtype = getattr(torch, args.dtype)
    if cuda:
        device = torch.device("cuda", args.gpus[rank])
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    dist.init_process_group(args.backend, init_method="file://" + store, rank=rank, world_size=args.ranks,
                            timeout=datetime.timedelta(seconds=args.timeout))
    lead = rank == 0
    n = args.ranks
    if lead:
        nccl = ""
        if cuda:
            try:
                nccl = " NCCL " + ".".join(map(str, torch.cuda.nccl.version()))
            except Exception:
                nccl = ""
        event("env", torch=torch.__version__, device=torch.cuda.get_device_name(device) if cuda else "cpu",
             ranks=n, simulated=False,
             backends={args.backend: f"torch.distributed {args.backend}{nccl}, {n} ranks, one process per "
                                       f"{'GPU' if cuda else 'CPU rank'}"},
             notes=["torch.distributed.all_reduce works in place: each size is timed eager and, on CUDA, "
                    "captured in a CUDA graph; time is the slowest rank's"])

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def slowest(us: float) -> float:
        t = torch.tensor([us], dtype=torch.float64 if not cuda else torch.float32, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def timed(fn: object, iters: int) -> float:
        """us per call of fn() over iters calls, the slowest rank's."""
        sync()
        dist.barrier()
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(iters):
                fn()
            b.record()
            b.synchronize()
            us = a.elapsed_time(b) * 1000.0 / iters
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            us = (time.perf_counter() - t0) * 1e6 / iters
        return slowest(us)

    def graph_of(fn: object, calls: int) -> object:
        g = torch.cuda.CUDAGraph()
        try:
            ctx = torch.cuda.graph(g, capture_error_mode="thread_local")
        except TypeError:
            ctx = torch.cuda.graph(g)
        with ctx:
            for _ in range(calls):
                fn()
        return g

    # rank 0 watches every rank's GPU: the caps met while each row was measured (kimitui/hostside/clocks.py)
    watch = ClockWatch.for_devices(torch, [f"cuda:{g}" for g in args.gpus[:n]] if cuda and lead else [])
    sizes = sizes_for(args)
    modes = [m for m in args.modes if m == "eager" or (m == "graph" and cuda)]
    if lead and "graph" in args.modes and not cuda:
        event_log("info", f"graph mode needs CUDA: eager only with {args.backend}")
    burst_mode = "graph" if cuda else "eager"
    skip = set(args.skip)
    total = len(sizes) * len(modes) + len(args.burst_tokens) - len(skip)
    done = 0
    elems = max(s for s, _ in sizes) // DTYPE_BYTES[args.dtype]
    buf = torch.zeros(elems, dtype=dtype, device=device)
    dist.all_reduce(buf[:1])  # communicators up before anything is timed or captured
    watch.lap()
    for size, tokens in sizes:
        x = buf[: size // DTYPE_BYTES[args.dtype]]
        iters = args.iters if size < (64 << 20) else max(3, args.iters // 4)
        x.fill_(1)
        dist.all_reduce(x)
        sync()
        wrong = int((x != n).sum().item())
        x.zero_()
        for mode in modes:
            if f"{mode}|{size}" in skip:  # a resumed run has it
                continue
            if lead:
                event("progress", item=f"{size} B {mode}", done=done, total=total)
            for _ in range(args.warmup):
                dist.all_reduce(x)
            if mode == "eager":
                t = timed(lambda x=x: dist.all_reduce(x), iters)
            else:
                g = graph_of(lambda x=x: dist.all_reduce(x), iters)
                g.replay()
                t = timed(g.replay, 3) / iters
                del g
            if lead:
                event("row", **row(args, size, tokens, mode, t, wrong, clocks=watch.lap()))
            done += 1
    hidden_el = args.hidden
    for m in args.burst_tokens:
        if f"burst|{m}" in skip:
            continue
        if lead:
            event("progress", item=f"burst of {args.burst} at M={m}", done=done, total=total)
        bufs = [torch.zeros(m * hidden_el, dtype=dtype, device=device) for _ in range(args.burst)]

        def step(bufs: list = bufs) -> None:
            for b in bufs:
                dist.all_reduce(b)

        step()
        if cuda:
            g = graph_of(step, 1)
            g.replay()
            burst_us = timed(g.replay, max(3, args.iters // 4))
            del g
        else:
            burst_us = timed(step, 3)
        if lead:
            size = m * hidden_el * DTYPE_BYTES[args.dtype]
            event("row", **row(args, size, m, burst_mode, burst_us / args.burst, 0, args.burst, burst_us,
                               clocks=watch.lap()))
        done += 1
        del bufs
    sync()
    dist.barrier()
    dist.destroy_process_group()
    if lead:
        event("done", rows=done, elapsed_s=None)
    return 0


def rank_process(rank: int, args: argparse.Namespace, store: str, release: int) -> None:
    """The child after fork: default signals, die with the launcher, run, exit without cleanup handlers."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent()
    code = 1
    try:
        code = modelled_rank(rank, args, release) if args.modelled else torch_rank(rank, args, store)
    except ImportError as exc:
        event("error", message=f"rank {rank}: this host's python cannot import torch ({exc})")
    except Exception as exc:
        text = str(exc).strip().splitlines()
        event("error", message=f"rank {rank}: {type(exc).__name__}: {text[0][:300] if text else ''}")
    os._exit(code)


# --- the launcher -------------------------------------------------------------------------------------

class Launcher:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.children: dict = {}
        self.store_dir = tempfile.mkdtemp(prefix="kimitui-allreduce-")
        self.release_r, self.release_w = os.pipe()

    def start(self) -> None:
        sys.stdout.flush()
        for rank in range(self.args.ranks):
            pid = os.fork()
            if pid == 0:
                os.close(self.release_w)
                rank_process(rank, self.args, os.path.join(self.store_dir, "store"), self.release_r)
            self.children[pid] = rank
        os.close(self.release_r)

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM every rank still running, SIGKILL what is left after ``grace`` (children: their pids
        cannot be reused before we reap them)."""
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while self.children and time.monotonic() < deadline:
            self.reap(block=False)
            time.sleep(0.02)
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while self.children:
            self.reap(block=True)

    def reap(self, block: bool) -> tuple:
        """(rank, exit code) of one child that ended, or None."""
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self.children.clear()
            return None
        if pid == 0 or pid not in self.children:
            return None
        rank = self.children.pop(pid)
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
        return rank, code

    def wait(self) -> int:
        failed = 0
        while self.children:
            ended = self.reap(block=True)
            if ended is None:
                continue
            rank, code = ended
            if code and not failed:
                failed = code
                event("error", message=f"rank {rank} exited with status {code}: stopping the other ranks")
                self.stop()
            elif rank == 0 and self.args.modelled:
                os.close(self.release_w)  # the lead is done: the other modelled ranks let go
                self.release_w = -1
        return failed

    def cleanup(self) -> None:
        if self.release_w >= 0:
            try:
                os.close(self.release_w)
            except OSError:
                pass
            self.release_w = -1
        shutil.rmtree(self.store_dir, ignore_errors=True)


def parse_args(argv: list) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="kimitui-allreduce")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--gpus", default="", help="GPU of each rank, e.g. 0,1,2,3 (default 0..ranks-1)")
    ap.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPE_BYTES))
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--tokens", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--sweep-min", type=int, default=1024)
    ap.add_argument("--sweep-max", type=int, default=1 << 30, help="0: no sweep")
    ap.add_argument("--modes", default="eager,graph")
    ap.add_argument("--burst", type=int, default=122)
    ap.add_argument("--burst-tokens", default="1,8,32,128", help="M of the bursts ('' for none)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modelled", choices=sorted(MODELS))
    ap.add_argument("--sim-dir")
    ap.add_argument("--sim-mib", type=int, default=1090)
    ap.add_argument("--pace", type=float, default=0.0)
    ap.add_argument("--skip", type=json.loads, default=[],
                    help="JSON list of rows not to measure (MODE|BYTES, burst|M): a resumed run has them")
    args = ap.parse_args(argv)
    ints = lambda text: [int(x) for x in text.split(",") if x.strip()]  # noqa: E731
    args.tokens, args.burst_tokens, args.modes = ints(args.tokens), ints(args.burst_tokens), \
        [m.strip() for m in args.modes.split(",") if m.strip()]
    args.gpus = ints(args.gpus) or list(range(args.ranks))
    if args.ranks < 1 or len(args.gpus) != args.ranks:
        ap.error("--gpus must name one GPU per rank")
    return args


def main(argv: list | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    t0 = time.time()
    event("hello", part="allreduce", pid=os.getpid(), python=".".join(map(str, sys.version_info[:3])),
         ranks=args.ranks, simulated=bool(args.modelled))
    launcher = Launcher(args)
    stopping = {"signal": 0}

    def on_signal(signum: int, _frame: object) -> None:
        stopping["signal"] = signum
        launcher.stop()
        launcher.cleanup()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    launcher.start()
    try:
        code = launcher.wait()
    finally:
        launcher.cleanup()
    if code == 0:
        event_log("info", f"all {args.ranks} ranks ended in {time.time() - t0:.1f} s")
    return 1 if code else 0

