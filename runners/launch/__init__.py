"""Launching: profiles, launch plans and one module per runner."""
