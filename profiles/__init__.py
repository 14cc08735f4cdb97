"""Profiles shipped with ddptui (YAML files beside this module)."""
