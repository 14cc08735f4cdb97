"""Widgets of the ddptui dashboard, each drawn from the run model."""
