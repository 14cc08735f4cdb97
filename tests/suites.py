"""Which test modules are the engine's and the dashboard's own (run on every supported Python), in one place."""
from __future__ import annotations

# `make test-pythons` runs these on Python 3.10, 3.12 and 3.13 in venvs without torch (marker any_python): nothing
# in the test process imports torch, and the ranks they start run on DDPTUI_PYTHON (the .venv's python, torch 2.13),
# the interpreter ddptui gives a profile that names none, or on the interpreter their profile names (xla-venv).
ANY_PYTHON = frozenset({
    "test_console_verdicts", "test_docs_links", "test_hang_verdict", "test_hints", "test_import_hygiene",
    "test_mirage_plan", "test_preflight", "test_profile", "test_profile_props", "test_rank_python", "test_replica",
    "test_slow_banner", "test_stacks_view", "test_stall", "test_steptime", "test_suites", "test_tail_parse",
    "test_tui_app", "test_tui_fit", "test_tui_latency", "test_tui_model", "test_tui_snapshots", "test_xla_evidence",
    "test_xla_plan", "test_judge", "test_rankenv", "test_torchrun_argv", "test_tui_pace",
})

# The main suite only (the .venv's Python 3.11 with torch 2.13), each with why.
RANKS_ONLY = {
    "test_inject": "the ranks' injected code: imports torch in the test process",
    "test_workloads": "the built-in workloads, run on the test's own interpreter",
    "test_inject_modules": "the ranks' injected code: imports torch in the test process (skipped without it)",
    "test_cli": "its wrapped commands name the test's own interpreter (and its torchrun) as the ranks'",
    "test_crash": "its wrapped torchrun runs on the test's own interpreter",
    "test_inject_scope": "its wrapped torchrun and rank programs run on the test's own interpreter",
    "test_procs": "its ad-hoc ranks run on the test's own interpreter",
    "test_replica_runs": "its ad-hoc ranks run on the test's own interpreter",
    "test_mirage_runs": "its mirage runs torchrun beside the test's own interpreter",
    "test_engine_e2e": "long end-to-end rank runs, some on the test's own interpreter",
    "test_slow_stall_e2e": "long end-to-end rank runs (the engine under them is in the any_python set)",
    "test_stacks": "long end-to-end rank runs (the engine under them is in the any_python set)",
    "test_stall_report": "long end-to-end rank runs (the engine under them is in the any_python set)",
    "test_tui_live": "long end-to-end rank runs (the engine under them is in the any_python set)",
    "test_tui_panes_live": "long end-to-end rank runs (the engine under them is in the any_python set)",
    "test_tui_tmux": "long end-to-end rank runs (the engine under them is in the any_python set)",
    "test_xla_runs": "long end-to-end rank runs (the engine under them is in the any_python set)",
    "test_profile_cli": "long end-to-end rank runs (the engine under them is in the any_python set)",
    "test_installed": "pip-installs the checkout into a folder: once is enough",
}

# These check the interpreter a profile naming none gets (ddptui's own): they run without DDPTUI_PYTHON.
OWN_INTERPRETER = frozenset({"test_profile", "test_profile_props", "test_mirage_plan"})
