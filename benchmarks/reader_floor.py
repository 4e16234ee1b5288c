"""The floor of a streaming client's CPU: what reading each chunk as it arrives costs a Python process, read three
ways, side by side against one server (issue 34 item 2: the client-CPU target of 1/5 of vLLM's client).

    python benchmarks/reader_floor.py [--chunks 64] [--gap-ms 2] [--requests 32] [--concurrency 1 4 16] [--batch-ms 10]

A stdlib server (its own process, pinned to the last core) streams each request as an OpenAI completion does:
chunked SSE, ``--chunks`` events ``--gap-ms`` apart. Three clients (each its own process, pinned to core 0) send
the same requests over keep-alive connections and keep a timestamp per read, nothing parsed:

  asyncio   an asyncio.Protocol (the floor benchmarks/vs_vllm_bench.py names ``bare``; kimitui's client and
            vLLM's ``bench serve`` both read on an asyncio loop)
  epoll     one thread, select.epoll over non-blocking sockets: no event loop at all, the least a Python process
            does per read
  kstamp    epoll again, but each event is stamped by the kernel (SO_TIMESTAMPNS: the receive time of the TCP
            segment that completed it, read with ``recvmsg`` up to the event's end after a ``MSG_PEEK``) and the
            thread sleeps ``--batch-ms`` after each pass, so several events wait in the kernel per wakeup: fewer
            wakeups with the stamps kept, paid for by a request's end being seen up to ``--batch-ms`` late

Printed: each one's CPU (user and system, over the measured requests, one warm-up request per connection not
counted), its reads, the ratios, and kstamp's wall time over asyncio's (its cost in throughput). On the 2-core
machine of 2026-12-05 (c = 1 / 4 / 16): asyncio 0.106-0.121 / 0.051-0.056 / 0.035-0.040 s for about 2,080 reads;
epoll 0.56-0.60x / 0.36-0.38x / 0.28-0.32x of it (one outlier of 1.02x at c=1); kstamp (10 ms) 0.45-0.61x /
0.31-0.37x / 0.25-0.27x, its runs 3-6 % longer. vs_vllm_bench.py measured the asyncio floor at 0.49x (c=1) /
0.58x (c=4) of vLLM's client on a real vLLM. So a reader with no event loop that only stamps each read stands at
about 0.28x / 0.21x of vLLM's client, and one that lets the kernel stamp the events and wakes at most every 10 ms
at 0.22-0.30x / 0.18-0.21x, before it parses a byte (kimitui's JSON and accounting per chunk come on top) and at
a throughput cost the 5 % target cannot afford. The 0.2x target is below what a Python client that times each
chunk can spend.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

SERVER = r'''
import asyncio, sys
port, n, gap = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
EVENT = b'data: {"id":"cmpl-0","object":"text_completion",'\
    b'"choices":[{"index":0,"text":" the","finish_reason":null}]}\n\n'
async def handle(r, w):
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            size = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
            await r.readexactly(int(size[0].split(b":")[1]))
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(n):
                w.write(b"%x\r\n%s\r\n" % (len(EVENT), EVENT))
                await asyncio.sleep(gap)
            w.write(b"0\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
async def main():
    async with await asyncio.start_server(handle, "127.0.0.1", port) as s:
        print("ready", flush=True)
        await s.serve_forever()
asyncio.run(main())
'''

COMMON = r'''
import json, resource, sys, time
port, c, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
END = b"0\r\n\r\n"
REQ = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"\
    b"\r\nContent-Length: 2\r\n\r\n{}"
def shares(): return [n // c + (i < n % c) for i in range(c)]
def usage(): r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime, r.ru_stime, time.perf_counter()
def report(u0, reads):
    u1 = usage()
    print(json.dumps({"user": u1[0] - u0[0], "sys": u1[1] - u0[1], "wall": u1[2] - u0[2], "reads": reads}))
'''

ASYNCIO = COMMON + r'''
import asyncio
reads = [0]
class Bare(asyncio.Protocol):
    done = None
    def connection_made(self, tr): self.stamps = []
    def data_received(self, data):
        self.stamps.append(time.perf_counter()); reads[0] += 1
        if data.endswith(END) and self.done is not None and not self.done.done(): self.done.set_result(None)
async def worker(loop, jobs):
    tr, pr = await loop.create_connection(Bare, "127.0.0.1", port)
    for _ in range(jobs):
        pr.done = loop.create_future(); tr.write(REQ); await pr.done
    tr.close()
async def main():
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(worker(loop, 1) for _ in range(c)))
    reads[0] = 0; u0 = usage()
    await asyncio.gather(*(worker(loop, j) for j in shares()))
    report(u0, reads[0])
asyncio.run(main())
'''

EPOLL = COMMON + r'''
import select, socket
def run(jobs):
    ep, socks, left, stamps = select.epoll(), {}, {}, []
    for j in jobs:
        s = socket.create_connection(("127.0.0.1", port)); s.setblocking(False)
        socks[s.fileno()], left[s.fileno()] = s, j
        s.sendall(REQ); ep.register(s.fileno(), select.EPOLLIN)
    active = len(socks)
    while active:
        for fd, _ in ep.poll():
            s = socks[fd]; data = s.recv(65536); stamps.append(time.perf_counter())
            if data.endswith(END):
                left[fd] -= 1
                if left[fd]: s.sendall(REQ)
                else: ep.unregister(fd); s.close(); active -= 1
    return len(stamps)
run([1] * c)
u0 = usage()
report(u0, run(shares()))
'''


KSTAMP = COMMON + r"""
import select, socket, struct
BATCH = float(sys.argv[4]) / 1000
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
ANC = socket.CMSG_SPACE(16)
unpack = struct.Struct("qq").unpack
def run(jobs):
    ep, socks, left, stamps = select.epoll(), {}, {}, []
    for j in jobs:
        s = socket.create_connection(("127.0.0.1", port)); s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        socks[s.fileno()], left[s.fileno()] = s, j
        s.sendall(REQ); ep.register(s.fileno(), select.EPOLLIN)
    active = len(socks)
    while active:
        for fd, _ in ep.poll():
            s = socks[fd]; data = s.recv(65536, socket.MSG_PEEK); pos = 0
            while True:  # one read per complete event: the kernel's stamp of the segment that ended it
                k = data.find(b"\n\n", pos)
                if k < 0: break
                _, anc, _, _ = s.recvmsg(k + 2 - pos, ANC); pos = k + 2
                if anc: stamps.append(unpack(anc[0][2]))
            if pos < len(data): s.recv(len(data) - pos)
            if data.endswith(END):
                left[fd] -= 1
                if left[fd]: s.sendall(REQ)
                else: ep.unregister(fd); s.close(); active -= 1
        time.sleep(BATCH)  # let the next events queue in the kernel, stamped as they arrive
    return len(stamps)
run([1] * c)
u0 = usage()
report(u0, run(shares()))
"""


def pinned(core: int):  # type: ignore[no-untyped-def]
    return (lambda: os.sched_setaffinity(0, {core})) if hasattr(os, "sched_setaffinity") else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client(code: str, port: int, c: int, n: int, *extra: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", code, str(port), str(c), str(n), *extra], capture_output=True,
                         text=True, check=True, preexec_fn=pinned(0), timeout=300)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch-ms", type=float, default=10.0, help="the kstamp reader's least time between wakeups")
    args = ap.parse_args()
    port = free_port()
    last = (os.cpu_count() or 1) - 1
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(args.chunks), str(args.gap_ms / 1000)],
                              stdout=subprocess.PIPE, text=True, preexec_fn=pinned(last))
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        print(f"server on core {last}, clients on core 0; {args.requests} requests of {args.chunks} chunks "
              f"{args.gap_ms:g} ms apart; CPU over the measured requests (user + system), and each reader's "
              f"CPU and wall time over asyncio's (kstamp wakes at most every {args.batch_ms:g} ms)")
        print(f"{'c':>4}  {'asyncio s':>18}  {'epoll s':>18}  {'kstamp s':>18}  {'reads':>6} {'stamps':>6}  "
              f"{'epoll/asyncio':>13}  {'kstamp/asyncio':>14}  {'kstamp wall':>11}")
        for c in args.concurrency:
            for _ in range(args.rounds):
                a = client(ASYNCIO, port, c, args.requests)
                e = client(EPOLL, port, c, args.requests)
                k = client(KSTAMP, port, c, args.requests, str(args.batch_ms))
                ca, ce, ck = (r["user"] + r["sys"] for r in (a, e, k))

                def col(r: dict[str, float], cpu: float) -> str:
                    return f"{cpu:6.3f} ({r['user']:.3f}+{r['sys']:.3f})"
                print(f"{c:>4}  {col(a, ca)}  {col(e, ce)}  {col(k, ck)}  {int(e['reads']):>6} {int(k['reads']):>6}  "
                      f"{ce / ca:>12.2f}x  {ck / ca:>13.2f}x  {k['wall'] / a['wall']:>10.3f}x", flush=True)
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
