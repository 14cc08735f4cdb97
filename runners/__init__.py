"""ddptui engine: profiles, runners, process supervision, parsing and verdicts (never imports textual)."""
