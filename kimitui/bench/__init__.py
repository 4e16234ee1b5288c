"""Benchmarks: ``macro`` drives an OpenAI-compatible server (vLLM) and measures serving metrics with vLLM's
definitions; ``micro`` (elsewhere) measures kernels on the GPU host. Nothing here imports Textual."""
