"""The campaign files kimitui writes or runs itself: ``INIT_TEXT``, the commented example ``kimitui campaign
--init`` writes; ``DEMO_TEXT`` and ``demo_config()``, the embedded default ``kimitui demo --campaign`` runs on the
simulated host (``VLLM_DEMO``: its lighter form over a real vLLM)."""

from __future__ import annotations

import tomllib
from typing import Any

from kimitui.campaign.config import CampaignConfig, parse_config


def demo_config(engine: str = "sim") -> CampaignConfig:
    """The embedded default: the whole campaign on the simulated host, short (about a minute and a half):
    every consent given (the host is simulated), the macro levels up to the 1536 tok/s plateau at 128. With a
    real vLLM (``engine="vllm"``) the lighter ``VLLM_DEMO``."""
    data = tomllib.loads(DEMO_TEXT)
    if engine != "sim":
        for section, values in VLLM_DEMO.items():
            data.setdefault(section, {}).update(values)
    cfg = parse_config(data, "the demo campaign")
    cfg.file = "(built in: kimitui demo --campaign)" if engine == "sim" else \
        f"(built in: kimitui demo --campaign --engine {engine})"
    return cfg


VLLM_DEMO: dict[str, dict[str, Any]] = {
    "campaign": {"name": "demo: a real vLLM (a tiny random Llama on this machine's CPUs), simulated RTX PRO 6000s"},
    "macro": {"concurrency": [1, 2, 4], "requests": "8x", "warmup": 4, "max_tokens": 32},
    "cleanup": {"drain_s": 120, "graceful_s": 60, "term_grace_s": 5, "verify_s": 30},
    "micro": {"ms": [1, 2, 4]},
    "restart": {"health_s": 900},
    "check": {"requests": 8, "margin_pct": 50, "ttft_margin_pct": 1000},
}
"""The demo campaign over a real vLLM on a CPU of 2 cores or so (``kimitui demo --campaign --engine vllm``): a few
levels of short answers (32 tokens; about three minutes in all, most of it the engine's two starts), the waits of a
real engine (its start takes 45 s or more alone on 2 cores, eager), a few requests not counted before Phase 1 and the
probe (a freshly started engine's first ones are slow), 8 requests at concurrency 1 on each side of the check (judged
against their spread), and its margins wide: the tiny model's TTFT is about 10 ms, below this machine's own noise
(the engine's workers busy-poll both cores: the client waited for a CPU 86-98 % of each level and its loop lagged
~100 ms, TTFTs read 50-290 ms, a single stream's tok/s 217 in one run and 549 in the next), so the TTFT check is in
effect off and a drop of tok/s by half beyond the spread is what is flagged."""


DEMO_TEXT = """
[campaign]
name = "demo: Kimi-K2.5 on the simulated 8 x RTX PRO 6000"
host = "demo"
sample_interval_s = 0.5
operator = "kimitui-demo"

[service]
spec = "sim:vllm"

[consent]
drain = "yes"
graceful = "yes"
process = "yes"
others = "yes"
device = "yes"
reset = "no"
restart = "yes"
abort_restart = "yes"

[macro]
concurrency = [1, 8, 32, 128]
requests = "2x"
max_tokens = 64
input_len = 32
warmup = 0

[cleanup]
drain_s = 20
graceful_s = 3
term_grace_s = 2
verify_s = 10

[micro]
ms = [1, 8, 32, 128]
sweep_max_bytes = 67108864
pace_s = 0.01

[restart]
health_s = 60

[check]
requests = 3
"""

INIT_TEXT = """\
# A kimitui campaign: Phase 1 macro against the live server, the transition (the cleanup escalation, each
# step previewed and consented), Phase 2 micro on the freed GPUs, Phase 3 the analysis of a decode step,
# the service restarted (health waited for), and a post-restart check against Phase 1.
#
#   kimitui campaign THIS_FILE              the campaign in the dashboard (consent "ask" opens a modal)
#   kimitui campaign THIS_FILE --headless   no dashboard: every consent must be yes/no here or by --yes/--no
#   kimitui campaign THIS_FILE --resume RUN after a crash or kill -9: go on from the first unfinished phase
#   kimitui report RUN                      the Markdown report of the campaign

[campaign]
name = "Kimi-K2.5 INT4, TP=8"
host = "ssh://ops@gpu-node-01"       # local, demo (the simulated 8-GPU host), ssh://[user@]host[:port] or an alias
# phases = ["macro", "cleanup", "micro", "analysis", "restart", "check"]   # a subset, in this order
sample_interval_s = 0.5             # telemetry sampling, 0.1 to 10 s
# remote_python = "/usr/bin/python3" # the python that runs kimitui's agent on an SSH host (3.8 or newer)
# operator = "ana"                   # who consents (audit log); default the current user
# accept_new_host_key = false

[service]
spec = "systemd:vllm.service"       # systemd:UNIT, docker:NAME, supervisor:PROGRAM[@CONF], pidfile:PATH, pid:N,
                                    # sim:NAME (the demo's), or none (free the GPUs of whatever holds them)
api_url = "http://gpu-node-01:8000" # the OpenAI-compatible server: the macro sweep, the drain, the probe
                                    # (with host = "demo" leave it out: the simulated host's own server is used)
# health_url = "http://127.0.0.1:8000/health"   # polled from the host after the restart (default api_url/health)
# metrics_url = "http://gpu-node-01:8000/metrics" # vLLM's Prometheus metrics, read for the drain

[consent]
# Per step: "ask" (a modal in the dashboard; refused by --headless unless --yes/--no answers it), "yes", "no".
drain = "ask"           # wait for the requests running and waiting on the server before the graceful stop
graceful = "ask"        # the service manager's stop
process = "ask"         # SIGTERM then SIGKILL what is left of the service (its processes as identified at the start)
others = "ask"          # the same for what holds the GPUs and is not the service (another user's job, a notebook)
device = "ask"          # the same for what still holds a CUDA context on the GPUs: the service's processes, and
                        # the others' only when "others" was consented
reset = "no"            # nvidia-smi --gpu-reset, offered only when nothing holds a GPU that is still not clean
restart = "ask"         # start the service again after Phase 3
abort_restart = "ask"   # after an abort (or a transition that did not free the GPUs): restart the service

[macro]
concurrency = [1, 2, 4, 8, 16, 32, 64, 128]
requests = "4x"         # per level: a count (64) or a multiple of the concurrency (4x)
max_tokens = 128
input_len = 128
warmup = 1
endpoint = "completions"  # or chat
# model = ""            # default: the first model /v1/models lists
ignore_eos = true       # vLLM's: every output max_tokens long; a server that refuses it runs without (a warning)
# goodput = "ttft:200,tpot:50"  # SLOs in ms (ttft, tpot, e2el): goodput, the top concurrency meeting them at p99
reset_prefix_cache = false  # drop the server's prefix cache before each level (vLLM: VLLM_SERVER_DEV_MODE=1)
# search = true         # with goodput: search the highest concurrency meeting it (lowest to highest level)
# rates = [2, 4, 8]     # levels by request rate (req/s), capped at the highest concurrency; Phase 3's budget
                        # and the check need concurrency levels: leave them out of [campaign] phases

[cleanup]
gpus = "all"            # or e.g. "0,1,2,3"
threshold_mib = 64      # a GPU is clean within this much of its idle memory
drain_s = 120           # the longest wait for the requests to drain
graceful_s = 30
term_grace_s = 5        # SIGTERM to SIGKILL
verify_s = 10
allow_other_users = false

[micro]
parts = ["gemm", "allreduce"]
# ms = [1, 2, 4, 8, 16, 32, 64, 128, 256]   # default: these and every macro level
backends = ["marlin", "torch-int4", "bf16"]
tp = 8
sweep_max_bytes = 1073741824
force = false           # run even when the GPUs hold memory (they should not after the transition)

[model]
# The model Phase 2 measures and Phase 3 divides. Left out, it is found from the server: the folder or
# Hugging Face id /v1/models names, its config.json read on the host (the folder, or the HF cache the
# server's processes use). A model that cannot be found is said before Phase 1.
# preset = "kimi-k2.5"  # measured when the server's model cannot be found: kimi-k2.5, glm-5, deepseek-v3,
#                       # qwen3-235b-a22b, llama-3.1-70b, gpt-oss-120b (kimitui shapes --model NAME)
# config = "/models/Kimi-K2.5/config.json"   # read on the host before the server's word (or its folder)
# tp = 8                # the tensor-parallel size it is served at (default: [micro] tp)
# expert_parallel = false  # served with --enable-expert-parallel

[restart]
health_s = 600          # the longest wait for the health endpoint after the start

[check]
requests = 8            # single-stream requests of the post-restart probe (5 or more: judged against their spread)
# max_tokens = 128      # default: the macro phase's
margin_pct = 10         # flag a single-stream tok/s that moved more than this from Phase 1's
ttft_margin_pct = 25    # flag a TTFT this much above Phase 1's
# warmup = 2            # requests sent first and not counted (a freshly started engine's first ones are slow);
                        # default: [macro] warmup, at least 2
"""
