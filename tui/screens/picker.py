"""The profile picker: shipped and ./profiles profiles, their resolved settings, nproc/steps/stall_after overrides."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from ..widgets.keybar import KeyBar

if TYPE_CHECKING:
    from ...runners.launch.profile.model import Profile

OVERRIDE_FIELDS = ("nproc", "steps", "stall_after")


def find_profiles(extra: Path | None = None) -> list[Path]:
    """The command line's path first, then what runners.launch.profile ships and finds in ./profiles."""
    try:
        from ...runners.launch.profile.find import list_profiles
        found = list(list_profiles())
    except ImportError:  # older engine: look in the two folders ourselves
        import ddptui.profiles as shipped
        found = sorted(Path(shipped.__file__).parent.glob("*.yaml")) + sorted(Path("profiles").glob("*.yaml"))
    out: list[Path] = []
    seen: set[Path] = set()
    for p in ([Path(extra)] if extra else []) + found:
        key = Path(p).resolve()
        if key not in seen:
            seen.add(key)
            out.append(Path(p))
    return out


def overrides_from(values: dict[str, str]) -> list[str]:
    """The inputs as --set style overrides; empty inputs keep the profile's value."""
    return [f"{k}={v.strip()}" for k, v in values.items() if v.strip()]


def settings_text(profile) -> Text:
    d = profile.to_json()
    w = d.get("workload") or {}
    what = next((f"{k}: {w[k]}" for k in ("builtin", "script", "module", "command") if w.get(k)), "?")
    if w.get("args"):
        what += " " + " ".join(map(str, w["args"]))
    t = Text()
    rows = [
        ("runner", profile.runner),
        ("ranks", f"{profile.nproc} × {profile.nnodes} node(s) = {profile.world_size}"),
        ("steps", str(profile.steps if profile.steps is not None else "(workload decides)")),
        ("stall_after", str(profile.stall_after)),
        ("on_stall", str(d.get("on_stall", "?"))),
        ("workload", what),
        ("backend/device", f"{d.get('backend', '?')} / {d.get('device', '?')}"),
    ]
    if d.get("fault"):
        f = d["fault"]
        rows.append(("fault", f"{f.get('kind')} on rank {f.get('rank')} at step {f.get('step')}"))
    for k, v in rows:
        t.append(f"{k:>15}  ", style="bold")
        t.append(f"{v}\n")
    return t


# What the footer says, by where focus is: in a field every printable key is typed (q, ?, p), so there only keys
# that reach the screen are shown.
LIST_KEYS = (("enter", "launch"), ("tab", "fields"), ("R", "runs"), ("q", "quit"), ("p", "screenshot"), ("?", "help"))
FIELD_KEYS = (("enter", "launch"), ("esc", "back to the list"), ("tab", "next"), ("^q", "quit"))


def footer_keys(in_field: bool) -> tuple[tuple[str, str], ...]:
    return FIELD_KEYS if in_field else LIST_KEYS


class PickerScreen(Screen):
    BINDINGS = [
        Binding("ctrl+l", "launch", "launch"),
        Binding("q", "app.quit_run", "quit"),
        Binding("ctrl+c", "app.quit_run", "quit", show=False),  # as q (in a field, Textual's copy)
        Binding("R", "app.runs", "runs"),
        Binding("escape", "to_list", "back to the list", show=False),
        Binding("question_mark", "app.help", "help"),
    ]

    def __init__(self, extra: Path | None = None) -> None:
        super().__init__()
        self.paths = find_profiles(extra)
        self.current: Profile | None = None  # the validated Profile of the highlighted entry (with overrides), or None

    def compose(self) -> ComposeResult:
        yield Static(Text(" ddptui · pick a profile (enter launches)", style="bold"), id="picker-head")
        with Horizontal(id="picker-body"):
            yield OptionList(*[Option(p.stem, id=str(i)) for i, p in enumerate(self.paths)], id="profile-list")
            with Vertical(id="profile-detail"):
                with VerticalScroll(id="profile-info", can_focus=False):  # scrolls on a short terminal: the
                    yield Static("", id="profile-path")                   # fields and Launch below stay in view
                    yield Static("", id="profile-desc")
                    yield Static("", id="profile-settings")
                with Horizontal(id="overrides"):
                    for f in OVERRIDE_FIELDS:
                        with Vertical(classes="override"):
                            yield Label(f)
                            yield Input(placeholder="(profile)", id=f"ov-{f}")
                yield Static("", id="profile-error")
                yield Button("Launch", variant="success", id="launch")
        yield KeyBar()

    def on_mount(self) -> None:
        ol = self.query_one(OptionList)
        if self.paths:
            ol.highlighted = 0
        else:
            self.query_one("#profile-error", Static).update(Text("no profiles found (profiles/*.yaml)", style="red"))
        ol.focus()
        self.validate()

    def on_descendant_focus(self) -> None:
        self.query_one(KeyBar).show_keys(footer_keys(isinstance(self.focused, Input)))

    def on_screen_resume(self) -> None:
        """Back from a run: the list has focus, whatever had it at launch (a field would take the next key)."""
        self.query_one(OptionList).focus()

    def action_to_list(self) -> None:
        self.query_one(OptionList).focus()

    def selected_path(self) -> Path | None:
        i = self.query_one(OptionList).highlighted
        return self.paths[i] if i is not None and 0 <= i < len(self.paths) else None

    def overrides(self) -> list[str]:
        return overrides_from({f: self.query_one(f"#ov-{f}", Input).value for f in OVERRIDE_FIELDS})

    def validate(self):
        """Load the highlighted profile with the overrides; show its settings or ProfileError's one line."""
        from ...runners.launch.profile.errors import ProfileError
        from ...runners.launch.profile.load import load_profile
        path = self.selected_path()
        err = self.query_one("#profile-error", Static)
        self.current = None
        if path is None:
            return None
        self.query_one("#profile-path", Static).update(Text(_shown(path), style="dim"))
        try:
            prof = load_profile(path, self.overrides())
        except ProfileError as e:
            err.update(Text(str(e), style="bold red"))
            self.query_one("#launch", Button).disabled = True
            return None
        err.update("")
        self.query_one("#launch", Button).disabled = False
        self.query_one("#profile-desc", Static).update(Text(prof.description or "(no description)", style="italic"))
        self.query_one("#profile-settings", Static).update(settings_text(prof))
        self.current = prof
        return prof

    @on(OptionList.OptionHighlighted)
    def _highlighted(self) -> None:
        self.validate()

    @on(OptionList.OptionSelected)
    def _selected(self) -> None:
        self.action_launch()

    @on(Input.Changed)
    def _changed(self) -> None:
        self.validate()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_launch()

    @on(Button.Pressed, "#launch")
    def _pressed(self) -> None:
        self.action_launch()

    def action_launch(self) -> None:
        prof = self.validate()
        if prof is not None:
            self.app.start_run(prof)  # type: ignore[attr-defined]  # the app is tui/app.py's, which imports this screen


def _shown(path) -> str:
    """The profile's path relative to the working folder when it is below it (shorter, and stable)."""
    import os
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel
