"""The dashboard's small items of issue 15: picker keys and focus, help per screen, the preflight reason in the banner,
Stacks copy and header, the screenshot key, the Verdict said once, one rank tag per line, `r` in a replay."""
from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input, OptionList

from ddptui.tui.app import DdpApp
from ddptui.tui.replay import ReplaySource
from ddptui.tui.screens.help import HelpScreen
from ddptui.tui.screens.picker import PickerScreen
from ddptui.tui.screens.run import RunScreen
from tests.support.ui import SIZE, ScriptSource, aio, screen_text, settle, until
from tests.support.scenes import crash_scenario

pytestmark = pytest.mark.any_python

RECORDS = Path(__file__).resolve().parent / "fixtures" / "records"
TINY = "name: tiny\ndescription: a tiny test profile\nnproc: 2\nworkload:\n  builtin: ddp_mlp\nsteps: 5\n"


def picker_app(tmp_path, monkeypatch, started: list) -> DdpApp:
    prof = tmp_path / "tiny.yaml"
    prof.write_text(TINY)
    app = DdpApp(picker_extra=prof, runs_root=tmp_path / "runs")
    monkeypatch.setattr(app, "start_run", lambda p: (started.append(p), app.start_source(ScriptSource(crash_scenario()))))
    return app


def footer(app) -> str:
    return str(app.screen.query_one("KeyBar").render())


# -- 5. the picker's keys and focus ----------------------------------------------------------------------------

@pytest.mark.timeout(30)
@aio
async def test_picker_escape_leaves_a_field_and_q_quits_from_the_list(tmp_path, monkeypatch):
    app = picker_app(tmp_path, monkeypatch, [])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen))
        assert isinstance(app.focused, OptionList) and " q  quit" in footer(app)
        await pilot.press("tab")
        assert isinstance(app.focused, Input) and app.focused.id == "ov-nproc"
        shown = footer(app)
        assert " q  quit" not in shown and "^q  quit" in shown and "esc  back to the list" in shown  # no lie in a field
        await pilot.press("escape")
        assert isinstance(app.focused, OptionList)
        assert " q  quit" in footer(app)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 5, "q from the list to quit")


@pytest.mark.timeout(30)
@aio
async def test_back_from_a_run_focus_is_on_the_list_not_in_a_field(tmp_path, monkeypatch):
    started: list = []
    app = picker_app(tmp_path, monkeypatch, started)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen))
        picker = app.screen
        await pilot.press("tab", "3", "enter")  # nproc=3, launched from the field
        await settle(pilot, app)
        assert started and started[0].nproc == 3 and isinstance(app.screen, RunScreen)
        await pilot.press("escape", "escape")  # crash tab → grid → picker
        assert app.screen is picker
        assert isinstance(app.focused, OptionList)
        await pilot.press("t")  # the next key no longer types into nproc (it gave --set nproc=3t)
        assert picker.query_one("#ov-nproc", Input).value == "3"
        assert picker.overrides() == ["nproc=3"]


@pytest.mark.timeout(30)
@aio
async def test_help_shows_the_keys_of_the_screen_it_was_opened_from(tmp_path, monkeypatch):
    app = picker_app(tmp_path, monkeypatch, [])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen))
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = str(app.screen.query_one("#help-keys").render())
        assert "profile picker" in str(app.screen.query_one("#help-title").render())
        assert "leave a field, back to the list" in keys and "dump the stacks" not in keys
        await pilot.press("escape")
        await pilot.press("enter")  # launch the highlighted profile
        await settle(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = str(app.screen.query_one("#help-keys").render())
        assert "dump the stacks" in keys and "leave a field" not in keys


def test_every_run_screen_key_is_in_its_help():
    """The help is true to the code: every key the run screen binds is explained (0-9 as one line)."""
    from ddptui.tui.screens.help import PICKER_KEYS, RUN_KEYS, ZOOM_KEYS
    from ddptui.tui.screens.zoom import ZoomScreen

    def said(keys) -> set[str]:
        out = set()
        for k, _ in keys:
            for part in k.replace(" / ", " ").split():
                out.add(part)
                if "-" in part and part[0].isdigit():
                    a, b = part.split("-")
                    out |= {str(i) for i in range(int(a), int(b) + 1)}
        return out

    from ddptui.tui.widgets.rank_table import RankTable
    from ddptui.tui.widgets.stacks_view import StacksView
    names = {"slash": "/", "question_mark": "?", "left_square_bracket": "[", "right_square_bracket": "]", "comma": ",",
             "full_stop": "."}
    moves = {"up", "down", "pageup", "pagedown", "home", "end"}  # a table's own cursor keys, as any list's
    widgets = [b for w in (RankTable, StacksView) for b in w.BINDINGS if b.key not in moves]
    for screen, keys, extra in ((RunScreen, RUN_KEYS, widgets), (PickerScreen, PICKER_KEYS, []),
                                (ZoomScreen, ZOOM_KEYS, [])):
        bound = {names.get(k, k) for b in [*screen.BINDINGS, *extra] for k in b.key.split(",")}
        missing = bound - said(keys)
        assert not missing, f"{screen.__name__}: keys without a help line: {sorted(missing)}"


# -- 6. a preflight failure says why in the banner -------------------------------------------------------------

def preflight_failed(problems: list[dict]):
    from ddptui.runners import events as ev
    t = 1_700_000_000.0
    return [[ev.RunStarted("/runs/x-pre", "mi350x-smoke", "mirage", 2, None, t),
             ev.LogLines(None, "err", t, 0.0, tuple(f"ddptui: preflight error: {p['message']} (fix: {p['fix']})"
                                                    for p in problems)),
             ev.RunFinished("preflight failed", 2, "/runs/x-pre/summary.json", t + 1,
                            {"status": "preflight failed", "exit_code": 2, "preflight": problems})]]


def test_banner_and_verdict_say_the_preflight_reason():
    from ddptui.tui.model import RunModel
    from ddptui.tui.widgets.banner import banner_text
    from ddptui.tui.widgets.verdict_view import headline
    problems = [{"code": "mirage-missing", "message": "mirage not found (mirage.command = ['mirage'])",
                 "fix": "put mirage on PATH"},
                {"code": "rocm-sdk", "message": "the ROCm SDK (rocm_sdk) is not installed", "fix": "pip install rocm"}]
    m = RunModel()
    for b in preflight_failed(problems):
        m.apply(b)
    cls, text = banner_text(m)
    assert cls == "-failed" and "preflight failed (exit code 2): mirage not found" in text
    assert "(fix: put mirage on PATH)" in text and "1 more in the Verdict tab" in text
    head = headline(m).plain
    assert "preflight: mirage not found" in head and "preflight: the ROCm SDK" in head and "fix: pip install rocm" in head
    m2 = RunModel()  # a record written before summary.json said why: the status alone, as before
    m2.apply(preflight_failed(problems)[0][:1] + [preflight_failed(problems)[0][2].__class__(
        "preflight failed", 2, "", 1_700_000_001.0, {})])
    assert banner_text(m2)[1].endswith("run preflight failed (exit code 2)")


# -- 7. Stacks: the header says ranks, y / Y copy --------------------------------------------------------------

def test_stacks_header_names_the_ranks_not_a_bare_number():
    """The hang record's verdict: culprits (1,), waiting (0,). The header said `waiting in a collective: 0`, read as
    none waiting while rank 0 waits in all_reduce."""
    from ddptui.runners.events import HangVerdict
    from ddptui.tui.widgets.stacks_view import in_collective, roles_line
    hv = HangVerdict("rank 1 is stuck ...", (1,), (0,), {
        "0": {"category": "collective", "detail": "all_reduce"}, "1": {"category": "sleep"}}, 0.0)
    assert roles_line(hv) == "culprits: rank 1   waiting in a collective: rank 0"
    # a mismatch: both sides are culprits and both wait in a collective
    mm = HangVerdict("ranks disagree at collective #11", (0, 1), (), {
        0: {"category": "collective"}, 1: {"category": "collective"}}, 0.0)
    assert in_collective(mm) == [0, 1] and roles_line(mm).endswith("waiting in a collective: ranks 0, 1")
    assert roles_line(HangVerdict("x", (), (), {}, 0.0)) == "culprits: none   waiting in a collective: none"


def test_rank_sections_and_the_one_at_the_top_of_the_view():
    from ddptui.tui.widgets.stacks_view import rank_sections, section_at
    plain = "verdict\nculprits\n\ncollected\n\n━━ rank 0 (waiting) · py-spy\n  a\n  b\n\n━━ rank 1 (culprit) · py-spy\n  c\n"
    secs = rank_sections(plain)
    assert secs == [(0, 5, 9), (1, 9, 12)]
    assert section_at(secs, 0, prefer=(1,)) == (1, 9, 12)  # above the ranks: the culprit's
    assert section_at(secs, 6) == (0, 5, 9) and section_at(secs, 10) == (1, 9, 12)
    assert section_at([], 0) is None


@pytest.mark.timeout(40)
@aio
async def test_y_copies_the_rank_at_the_top_of_the_stacks_view_and_Y_every_rank():
    from ddptui.tui.widgets.stacks_view import StacksView
    app = DdpApp(source=ReplaySource(RECORDS / "hang"))
    async with app.run_test(size=(100, 18)) as pilot:  # the stacks are taller than the view: it scrolls
        await settle(pilot, app, 30)
        screen = app.screen
        assert screen.query_one("#tabs").active == "stacks"
        view = screen.query_one(StacksView)
        assert view.has_focus
        assert "culprits: rank 1   waiting in a collective: rank 0" in str(view.query_one(".stacks-text").render())
        await pilot.press("y")
        assert app.clipboard.startswith("━━ rank 1 (culprit)") and "time.sleep" in app.clipboard
        assert "━━ rank 0" not in app.clipboard
        assert any("copied rank 1's stacks" in n.message for n in app._notifications)
        await pilot.press("Y")
        assert "━━ rank 0 (waiting)" in app.clipboard and "━━ rank 1 (culprit)" in app.clipboard
        assert app.clipboard.startswith(app.model.hang.text.split("\n")[0])  # the verdict heads every rank's stacks
        from ddptui.tui.widgets.stacks_view import display_rows
        plain = str(view.query_one(".stacks-text").render())
        lines = plain.split("\n")
        at = next(i for i, ln in enumerate(lines) if ln.startswith("━━ rank 0"))
        rows = display_rows(lines, view.query_one(".stacks-text").content_size.width)
        view.scroll_to(y=sum(rows[:at]) + 1, animate=False, immediate=True)  # a row inside rank 0's part
        assert view.scroll_y == sum(rows[:at]) + 1, (view.scroll_y, view.max_scroll_y)
        await pilot.pause()
        await pilot.press("y")
        assert app.clipboard.startswith("━━ rank 0 (waiting)") and "━━ rank 1" not in app.clipboard


# -- 8. the screenshot key saves into the run record -------------------------------------------------------------

def copied_record(tmp_path, name: str = "hang") -> Path:
    import shutil
    dst = tmp_path / name
    shutil.copytree(RECORDS / name, dst)
    return dst


@pytest.mark.timeout(40)
@aio
async def test_p_saves_a_screenshot_into_the_run_record_and_says_where(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_DOWNLOAD_DIR", raising=False)
    record = copied_record(tmp_path)
    app = DdpApp(source=ReplaySource(record))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, 30)
        await pilot.press("p")
        shots = sorted((record / "screenshots").glob("*.svg"))
        assert len(shots) == 1 and shots[0].read_text().lstrip().startswith("<svg")
        assert any(str(shots[0]) in n.message for n in app._notifications)
        app.deliver_screenshot()  # what the command palette's Screenshot calls
        assert len(list((record / "screenshots").glob("*.svg"))) == 2


@pytest.mark.timeout(40)
@aio
async def test_the_command_palette_screenshot_saves_into_the_run_record(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_DOWNLOAD_DIR", raising=False)
    record = copied_record(tmp_path, "crash")
    app = DdpApp(source=ReplaySource(record))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, 30)
        await pilot.press("ctrl+p")
        await pilot.press(*"Screenshot")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: list((record / "screenshots").glob("*.svg")), 10, "the palette's screenshot")
        assert not any(n.severity == "error" for n in app._notifications)


@pytest.mark.timeout(30)
@aio
async def test_screenshot_from_the_picker_goes_to_the_runs_folder(tmp_path, monkeypatch):
    app = picker_app(tmp_path, monkeypatch, [])
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen))
        await pilot.press("p")
        shots = list((tmp_path / "runs").glob("*.svg"))
        assert len(shots) == 1 and any(str(shots[0]) in n.message for n in app._notifications)


def test_shot_folder_decides_where():
    from ddptui.tui.screenshot import shot_folder, shot_name
    assert shot_folder("runs/x", Path("runs"), Path("/cwd")) == Path("runs/x/screenshots")
    assert shot_folder(None, Path("/nonexistent-runs"), Path("/cwd")) == Path("/cwd")
    assert shot_name(1_700_000_000.25).endswith("-250.svg")


# -- 9. replay r, the Verdict said once, one rank tag per line ---------------------------------------------------

@pytest.mark.timeout(40)
@aio
async def test_r_in_a_replay_says_why_it_does_not_rerun_and_the_footer_lists_no_live_only_key():
    app = DdpApp(source=ReplaySource(RECORDS / "crash"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, 30)
        model = app.model
        keys = footer(app)
        assert " t  timeline" in keys and " q  quit" in keys
        assert "stop" not in keys and "dump stacks" not in keys and "rerun" not in keys, keys
        await pilot.press("r")
        assert app.runs_started == 1 and app.model is model
        said = [n.message for n in app._notifications]
        assert any("r reruns live runs only" in m and "ddptui crash" in m for m in said), said
    live = DdpApp(source=ScriptSource(crash_scenario(), kind="live", hold=True))
    async with live.run_test(size=SIZE) as pilot:
        await settle(pilot, live)
        keys = footer(live)
        assert " s  stop" in keys and " d  dump stacks" in keys and " r  rerun" in keys, keys
        live.source.request_stop()


def test_replica_verdict_is_said_once_and_the_rank_status_once():
    from ddptui.runners.events import ReplicaVerdict
    from ddptui.tui.widgets.verdict_view import rank_end, replica_line
    differ = ReplicaVerdict("differ", "replicas differ: first differing parameter '2.weight': rank 1 differs from "
                            "rank 0", "2.weight", (1,), ("2.weight",), {}, 0.0)
    assert replica_line(differ) == differ.text
    same = ReplicaVerdict("identical", "all 2 ranks hold byte-identical weights (4 parameters)", None, (), (), {}, 0.0)
    assert replica_line(same) == "replicas identical: all 2 ranks hold byte-identical weights (4 parameters)"
    assert rank_end("exited ok", "exited 0", 0) == "exited ok" == rank_end("exited ok", "exited 0", None)
    assert rank_end("failed (SIGTERM)", "failed (SIGTERM)", -15) == "failed (SIGTERM)"
    assert rank_end("killed", "stopped by ddptui", None) == "stopped by ddptui"
    assert rank_end("running", None, None) == "running"


def test_a_rank_line_keeps_one_tag():
    from ddptui.tui.ranktag import untagged
    assert untagged(1, "[rank 1] step 3 loss 0.5") == "step 3 loss 0.5"
    assert untagged(0, "[rank0]:[W1203 21:51:33.26 WorkerServer.cpp:113] [c10d] Server") == "[W1203 21:51:33.26 WorkerServer.cpp:113] [c10d] Server"
    assert untagged(0, "[rank0]: Traceback (most recent call last):") == "Traceback (most recent call last):"
    assert untagged(0, "[rank 1] says hello to rank 0") == "[rank 1] says hello to rank 0"  # a peer's tag stays
    assert untagged(None, "[rank 1] x") == "[rank 1] x" and untagged(2, "[ranking] x") == "[ranking] x"


@pytest.mark.timeout(90)
def test_make_screenshots_writes_the_readme_pictures_from_the_current_build(tmp_path):
    """`make screenshots` runs scripts/screenshots.py; one picture here (all ten take a minute)."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, str(root / "scripts" / "screenshots.py"), "--out", str(tmp_path), "help.svg"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=80)
    assert p.returncode == 0, p.stderr
    svg = (tmp_path / "help.svg").read_text()
    assert svg.lstrip().startswith("<svg") and "dump&#160;the&#160;stacks" in svg
    assert "screenshots:" in (root / "Makefile").read_text()
    bad = subprocess.run([sys.executable, str(root / "scripts" / "screenshots.py"), "--out", str(tmp_path), "nope.svg"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown nope.svg" in bad.stderr


@pytest.mark.timeout(40)
@aio
async def test_help_in_a_zoomed_rank_shows_the_zoom_keys():
    from ddptui.tui.screens.zoom import ZoomScreen
    app = DdpApp(source=ReplaySource(RECORDS / "crash"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, 30)
        await pilot.press("escape", "1", "z")
        assert isinstance(app.screen, ZoomScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen) and "zoomed rank" in str(app.screen.query_one("#help-title").render())
        await pilot.press("escape")
        assert isinstance(app.screen, ZoomScreen)


def test_a_hint_toast_says_it_all_on_a_tall_terminal_and_points_to_the_hints_tab_on_a_short_one():
    from ddptui.runners import events as ev
    from ddptui.tui.widgets.hints_view import hint_toast

    h = ev.HintRaised("gloo-timeout", "Collective timeout", "A rank stopped calling the collective.",
                      "Find the rank that is elsewhere (stacks view).", 0, "gloo timeout", 0.0)
    assert hint_toast(h, short=False) == ("A rank stopped calling the collective.\nfix: Find the rank that is "
                                          "elsewhere (stacks view).", "Collective timeout (rank 0)")
    assert hint_toast(h, short=True) == ("h: why, and the fix", "Collective timeout (rank 0)")
    assert hint_toast(ev.HintRaised("x", "Launcher", "e", "f", None, "", 0.0), True)[1] == "Launcher (launcher)"


@pytest.mark.timeout(30)
@aio
async def test_at_80x24_a_hint_toast_leaves_the_crash_view_to_the_run():
    """At 80x24 a hint's explanation and fix covered 10 of the crash view's 17 rows for 8 s; there it is one line
    that points to the Hints tab, and a tall terminal still gets the whole of it."""
    for size, short in (((80, 24), True), ((160, 48), False)):
        app = DdpApp(source=ReplaySource(RECORDS / "crash"))
        async with app.run_test(size=size, notifications=True) as pilot:  # run_test shows no toasts unless asked
            await until(pilot, lambda: app.worker is not None and not app.running and app.drawn, 30, "the replay")
            await until(pilot, lambda: "A peer rank crashed" in screen_text(app), 10, f"the hint toast at {size}")
            text = screen_text(app)
            assert ("h: why, and the fix" in text) is short, text
            assert ("fix: Find the rank that failed first" in text.replace("\n", " ")) is not short, text
