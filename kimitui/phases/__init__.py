"""The campaign's phases as workers, each the one code path that sequences its phase: its PhaseStart, its
steps, its PhaseEnd (also when it fails, is cancelled or cannot start). The campaign machine, the one-phase
commands (``kimitui bench macro`` / ``bench micro``, ``kimitui cleanup``) and the dashboard's F, M, K and R
actions all call these; the engines (bench/, cleanup/, hosts/) never do.

- ``macro.macro_phase``: the serving sweep (``run_sweep`` has no phase of its own: this starts and ends it),
  its progress published as ``MacroProgress`` events for the panel (live and replayed alike);
- ``transition.cleanup_phase``: the escalation (drain, graceful, process, others, device, verify, reset);
- ``micro.micro_phase``: the GEMM and all-reduce benchmarks (``micro.free_before_micro``: the transition first
  when the GPUs hold memory);
- ``analysis.analysis_phase``: the decode-step budget and its verdict (``analysis.decode_budget``);
- ``restart.restart_phase``: the service started again, its health polled;
- ``check.check_phase``: the post-restart probe.
"""
