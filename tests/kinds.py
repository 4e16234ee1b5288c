"""Which kind each test module is, and which modules go first: read by tests/conftest.py (markers, order)
and checked by tests/test_import_contracts.py (every name here is a test module that exists).

``unit``: in-process, no child process, no server (conftest fails a unit test that starts one);
``integration``: real child processes, servers, an agent, a simulated host or the app under Textual's Pilot;
``e2e``: the kimitui command as a user runs it (a subprocess, a real terminal, a browser, the wheel) or a
real third-party server. A module not listed is ``integration``.
"""

from __future__ import annotations

KINDS: dict[str, tuple[str, ...]] = {
    "unit": (
        "test_agent_parsers", "test_campaign_shown_status", "test_clock_caps", "test_error_words", "test_events_typed",
        "test_fuzz_runfile", "test_level_result", "test_loadgen_units", "test_macro_client", "test_macro_lengths",
        "test_micro_text", "test_prefetched_source", "test_printable", "test_runchunks", "test_runfile",
        "test_sample_changes", "test_screen_diff", "test_signal_pairing", "test_ssh_target", "test_state_replay",
    ),
    "e2e": (
        "test_campaign_cli", "test_cleanup_cli", "test_cleanup_random", "test_clone_in_cwd", "test_compare",
        "test_demo_engine_vllm", "test_first_look", "test_fleet", "test_fleet_prometheus", "test_fleet_terminal",
        "test_live_commands",
        "test_macro_cli", "test_micro_cpu",
        "test_micro_sim", "test_outside_text", "test_quiet_driver", "test_record_cli", "test_report_figures",
        "test_serve", "test_tf_serve", "test_tui_exit", "test_tui_plain_draw", "test_vllm_real", "test_wheel",
    ),
}
"""Test modules by kind; every other test module is ``integration``."""

SLOW_FIRST = (
    "test_vllm_real", "test_demo_engine_vllm", "test_cleanup_random", "test_cleanup_cli", "test_tf_serve",
    "test_campaign_cli", "test_campaign", "test_tui_cleanup", "test_macro_cli", "test_fuzz_runfile",
    "test_macro_verdict", "test_serve", "test_micro_sim", "test_wheel", "test_campaign_preconditions",
)
"""The modules that take longest (``--durations``), in that order: handed to the workers before the rest."""

_KIND_OF = {name: kind for kind, names in KINDS.items() for name in names}


def kind_of(module: str) -> str:
    return _KIND_OF.get(module, "integration")
