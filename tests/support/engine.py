"""Running a profile through the real engine inside a test and keeping every event it emitted."""
from __future__ import annotations

from pathlib import Path

from ddptui.runners import events as ev
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.session import Session

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"
INJECT = ROOT / "runners" / "inject"  # what the ranks import first (sitecustomize, ddptui_report)


class Recorder:
    def __init__(self) -> None:
        self.events: list = []

    def __call__(self, batch) -> None:
        self.events.extend(batch)

    def of(self, cls) -> list:
        return [e for e in self.events if isinstance(e, cls)]

    def one(self, cls):
        found = self.of(cls)
        assert len(found) == 1, f"expected one {cls.__name__}, got {len(found)}"
        return found[0]

    def lines(self, rank) -> list[str]:
        return [ln for e in self.of(ev.LogLines) if e.rank == rank for ln in e.lines]


FIXTURES = ROOT / "tests" / "fixtures"


def script_profile(tmp_path: Path, script: str, env: dict, nproc: int = 2, timeout: int = 120, **fields) -> Path:
    """A profile for a fixture rank script under torchrun, gloo: `env` its variables, `fields` more profile fields."""
    lines = ["name: " + Path(script).stem, "runner: torchrun", f"nproc: {nproc}", "workload:",
             f"  script: {FIXTURES / script}", "backend: gloo", f"timeout: {timeout}"]
    lines += [f"{k}: {v}" for k, v in fields.items()]
    lines += ["env:"] + [f"  {k}: '{v}'" for k, v in env.items()]
    path = tmp_path / f"{Path(script).stem}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_profile(name_or_path, runs_dir: Path, overrides=(), **kw):
    path = name_or_path if str(name_or_path).endswith(".yaml") else PROFILES / f"{name_or_path}.yaml"
    profile = load_profile(path, list(overrides))
    rec = Recorder()
    session = Session(profile, runs_dir, emit=rec, **kw)
    code = session.run()
    return code, rec, session


class SharedRuns:
    """Runs of a shipped profile that tests in several modules read and none changes: one run per (profile,
    overrides) a session (fixture shared_run), where each test made its own."""

    def __init__(self, root: Path) -> None:
        self.root, self.done = root, {}

    def get(self, name: str, overrides=()):
        key = (name, tuple(overrides))
        if key not in self.done:
            runs_dir = self.root / f"{len(self.done)}-{name}"
            runs_dir.mkdir()
            self.done[key] = run_profile(name, runs_dir, overrides)
        return self.done[key]


def strict_reports(text: str) -> list[dict]:
    """Every `@ddptui` report line of a rank's output as strict JSON (a NaN or a torn line fails the test)."""
    import json

    def no_nan(c):
        raise ValueError(f"non-JSON constant {c}")
    return [json.loads(line[len("@ddptui "):], parse_constant=no_nan)
            for line in text.splitlines() if line.startswith("@ddptui ")]


def loss_steps(reps: list[dict]) -> list[int]:
    """Steps of every loss a rank reported, in order, from its batched `loss` reports."""
    return [pair[0] for x in reps if x["k"] == "loss" for pair in x["steps"]]


def reported_steps(reps: list[dict]) -> list[int]:
    """Every step a rank reported, by the step hook or with a loss."""
    return [x["step"] for x in reps if x["k"] == "step"] + loss_steps(reps)
