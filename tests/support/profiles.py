"""A profile written into the test's folder, the one-line error loading it gives, and a profile the stand-in mirage
runs."""
from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from ddptui.runners.launch.profile.errors import ProfileError
from ddptui.runners.launch.profile.load import load_profile

BASE = "workload:\n  script: train.py\n"


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error(path: Path, overrides=()) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        load_profile(path, overrides)
    assert "\n" not in str(info.value)
    return info.value


def standin(profile):
    """A profile run by the stand-in mirage: no ROCm SDK expected in the venv (the typed Profile, as the loader gives)."""
    return dataclasses.replace(profile, mirage=dataclasses.replace(profile.mirage, require_rocm=False))
