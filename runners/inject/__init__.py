"""Code put on the ranks' PYTHONPATH: sitecustomize (automatic instrumentation) and ddptui_report (explicit reports)."""
