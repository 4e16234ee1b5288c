"""Micro benchmarks on the GPU host: the model's per-GPU GEMM shapes (``shapes``), the worker programs
sent to the host (kimitui/hostside/gemm.py, allreduce.py: stdlib + torch, one payload each), how they are
started (``workers``), the caller-side runner that turns their JSON lines into events (``runner``), the
interconnect (``topology``) and the text tables (``tables``)."""
