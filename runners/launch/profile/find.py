"""Where profiles are found: a path, ./profiles/<name>.yaml, or the profiles shipped with ddptui."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import ProfileError
from .readers import _is_dir, _is_file, _suggest


def shipped_dir() -> Path | None:
    """The folder of profiles installed with ddptui (the `ddptui.profiles` package), if importable."""
    try:
        from importlib.resources import files

        folder = Path(str(files("ddptui.profiles")))
    except (ImportError, TypeError, ValueError):
        return None
    return folder if folder.is_dir() else None


def _candidates() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in (shipped_dir(), Path.cwd() / "profiles"):  # local last: it wins
        if folder is not None and folder.is_dir():
            for p in folder.glob("*.yaml"):
                found[p.stem] = p
    return found


def list_profiles() -> list[Path]:
    """Shipped and ./profiles YAML files, one per name (./profiles wins), sorted by name."""
    found = _candidates()
    return [found[k] for k in sorted(found)]


def find_profile(name_or_path: str | Path) -> Path:
    """An existing file, else ./profiles/<name>.yaml, else the shipped profile of that name."""
    p = Path(name_or_path)
    if _is_file(p) or (os.path.exists(p) and not _is_dir(p)):  # a FIFO or device: load_profile says what it is
        return p
    name = str(name_or_path)
    if name.endswith((".yaml", ".yml")) or os.sep in name:
        raise ProfileError(name, None, None, None, "no such file")
    for folder in (Path("profiles"), shipped_dir()):
        if folder is not None and _is_file(folder / f"{name}.yaml"):
            return folder / f"{name}.yaml"
    names = sorted(_candidates())
    raise ProfileError(None, None, None, None, f"no profile named '{name}'{_suggest(name, names)};"
                                               f" available: {', '.join(names) or 'none'}")
