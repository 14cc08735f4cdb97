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
    "test_xla_plan", "test_judge", "test_judge_parts", "test_rankenv", "test_torchrun_argv", "test_tui_pace",
    "test_profile_cli", "test_slurm_decisions",
    "test_console_nodes", "test_tui_nodes", "test_profile_multinode",
    "test_collectives", "test_tui_collectives", "test_fr_client", "test_flight_recorder_env", "test_fr_analysis",
    "test_fr_nccl_timeout",
    "test_tui_snapshot_matrix", "test_tui_nocolor",
    "test_tui_compact",
    "test_attach_find", "test_attach_liveness",
    "test_tui_rate", "test_tui_throughput",
    "test_tui_dashboard_items",
    "test_chart_scale", "test_tui_loss_chart",
    "test_fix_lines", "test_final_view",
    "test_world_view", "test_slurm_cancel", "test_node_lost_decisions",
    "test_stragglers", "test_rooms",
})

# Long end-to-end rank runs (20-40 s a test; 5 of these modules took 9 min on 3.10 on a loaded 2-core machine), while
# the engine and dashboard code under them is what the any_python set already runs: on 3.11 only, so `make test`
# stays well within CI's 90 minutes.
_LONG = "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)"

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
    "test_slow_stall_e2e": _LONG,
    "test_stacks": _LONG,
    "test_fr_record": _LONG + "; its plain torchrun commands run on the test's own interpreter",
    "test_stall_report": _LONG,
    "test_tui_live": _LONG,
    "test_tui_panes_live": _LONG,
    "test_tui_compact_live": _LONG,
    "test_tui_tmux": _LONG,
    "test_hangup": _LONG + "; its plain torchrun command runs on the test's own interpreter",
    "test_xla_runs": _LONG,
    "test_multinode_torchrun": _LONG + "; its plain rank scripts run on the test's own interpreter",
    "test_slurm_runs": _LONG + "; on a real Slurm cluster whose tasks run the test's own interpreter",
    "test_slurm_cluster": "a real Slurm cluster (root, Debian's slurm packages) whose tasks run the test's own interpreter",
    "test_slurm_job_lifecycle": "a real Slurm cluster whose tasks run the test's own interpreter",
    "test_inject_slurm": "a real Slurm cluster whose tasks run the test's own interpreter",
    "test_slurm_plan": "its ad-hoc srun runs the test's own interpreter on a real Slurm cluster",
    "test_node_identity_run": _LONG,
    "test_torchrun_c10d_run": _LONG,
    "test_remote_stacks": "the processes it dumps run on the test's own interpreter",
    "test_remote_stacks_slurm": "a real Slurm cluster on namespaced hosts whose gloo job runs the test's own interpreter",
    "test_fr_remote_slurm": "a real Slurm cluster on namespaced hosts whose gloo job runs the test's own interpreter",
    "test_node_lost": _LONG,
    "test_node_lost_slurm": "a real Slurm cluster on namespaced hosts whose gloo job runs the test's own interpreter",
    "test_collectives_run": _LONG,
    "test_fr_verdicts": _LONG,
    "test_rank_phases_run": _LONG,
    "test_samples_run": _LONG,
    "test_rank_debug_server": "real gloo ranks under ddptui; its AF_UNIX client and plain torchrun run beside the test's own interpreter",
    "test_rank_output": "a plain program's ranks under ddptui, and torch's debug server started on the test's own interpreter",
    "test_rank_learned": "its c10d torchrun agents run on the test's own interpreter",
    "test_slurm_cancel_runs": "a real Slurm cluster whose tasks run the test's own interpreter",
    "test_partial_world_run": "one ddptui per (namespaced) host wrapping c10d torchrun agents on the test's own interpreter",
    "test_attach_runs": "plain torchrun and torch.multiprocessing.spawn jobs started outside ddptui on the test's own interpreter",
    "test_attach_slurm": "real Slurm clusters (one host; two namespaced hosts) whose tasks run the test's own interpreter",
    "test_attach_session": _LONG + "; plain torchrun jobs started outside ddptui on the test's own interpreter",
    "test_attach_blind": _LONG + "; plain torchrun jobs started outside ddptui, writing to a pty, a pipe, /dev/null",
    "test_dashboard_items_runs": "its wrapped torchrun runs on the test's own interpreter",
    "test_tui_chart_live": _LONG + "; its ad-hoc ranks run on the test's own interpreter",
    "test_installed": "pip-installs the checkout with the test's interpreter (test-pythons installs it on each Python)",
    "test_load": _LONG + "; beside busy loops and lanes importing torch on the test's own interpreter",
}

# These check the interpreter a profile naming none gets (ddptui's own): they run without DDPTUI_PYTHON.
OWN_INTERPRETER = frozenset({"test_profile", "test_profile_props"})
