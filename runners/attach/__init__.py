"""Attaching to a job ddptui did not launch: finding its ranks, reading their output, watching them."""
