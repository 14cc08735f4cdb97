"""Profiles: YAML files read into frozen, validated dataclasses; every error names file:line:column and the field.

Nothing is exposed here: the runners import the model (model.py), and the loader (load.py) imports the runners for
their sections and rules, so a loader imported with this package would make every model import load the runners."""
