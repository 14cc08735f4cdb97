"""Screens of the ddptui dashboard: profile picker, run, zoom, help, quit confirmation."""
