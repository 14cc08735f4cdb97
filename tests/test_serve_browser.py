"""`ddptui serve` for real: a runs folder of a committed record and a live run served on a free loopback port, opened
in headless Chromium, read off its xterm.js terminal, driven with keys typed into the page; no process left behind."""
from __future__ import annotations

import asyncio
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from ddptui.runners.edge import control
from tests.support.browser import Browser, Served, chromium
from tests.support.cli import ROOT, ddptui

CHROMIUM, WHY_NOT = chromium()
RECORDS = Path(__file__).parent / "fixtures" / "records"
# a plain 2-rank gloo DDP loop under the user's own torchrun that runs until it is stopped (as test_detach's)
ENDLESS = ("--set", "timeout=120", "--", str(Path(sys.executable).parent / "torchrun"), "--standalone",
           "--nproc_per_node=2", str(ROOT / "tests" / "fixtures" / "healthy_ddp_loop.py"))

pytestmark = [
    pytest.mark.main_suite("a real browser and a served dashboard per tab (the serve rules are in test_serve.py)"),
    pytest.mark.skipif(CHROMIUM is None, reason=WHY_NOT),
]


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def viewers(pid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.Process(pid).children(recursive=True):
        try:
            if "ddptui.tui.viewer" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_for(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"no {what} after {timeout:g} s")
        time.sleep(0.05)


@pytest.mark.timeout(90)
def test_a_runs_folder_in_a_browser_tab_opens_a_record_that_draws_ranks_and_verdict_and_answers_keys(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(RECORDS / "crash", runs / "crash")
    served = Served(runs, runs_dir=True)
    try:
        url = served.wait_url()
        assert url.startswith("http://127.0.0.1:")
        base, token = url.rstrip("/").rsplit("/", 1)
        assert len(token) >= 20
        assert status_of(url) == 200
        assert status_of(base + "/") == 403 and status_of(f"{base}/{token[:-1]}x/") == 403
        assert status_of(f"{base}/static/js/textual.js") == 403 and status_of(f"{url}static/js/textual.js") == 200
        assert viewers(served.proc.pid) == []  # no tab, no viewer

        async def in_the_browser() -> None:
            browser = Browser(CHROMIUM)
            try:
                page = await browser.page()
                await page.call("Page.navigate", url=url)
                await page.wait_text(r"runs in \S*runs \(newest first(?s:.*)crash .*✗ failed", 60)  # the Runs screen
                assert len(viewers(served.proc.pid)) == 1 and control.state_of(runs / "crash").state == "finished"
                await page.press("Enter")  # opens the record: a finished one replayed
                # the crash verdict in the banner of the replay (the list said it too, without "replay")
                text = await page.wait_text(r"replay(?s:.*)rank 1 failed first", 30)
                assert "crash" in text and "failed" in text and "replay" in text
                assert len(viewers(served.proc.pid)) == 1  # this tab's own viewer process
                png = await page.screenshot(tmp_path / "tab.png")  # under tmp_path: never committed
                assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") >= 800
                await page.press("t")  # from the crash tab to the timeline: every rank's lines, timed
                text = await page.wait_text(r"\d+\.\d{3} launcher ! ddptui: launcher torchrun exited with 1", 15)
                await page.press("t")  # back to the rank grid: a pane per rank, side by side, each with its end
                # ... and the loss chart under them, a line per rank (drawn just after the panes)
                await page.wait_text(r"✗ failed \(SIGTERM\) ═+╝┗━+ ✗ failed \(exit 1\) ━┛(?s:.*)━━ r0(?s:.*)━━ r1", 15)
                await page.press("q")  # leaves the record for the list, the tab's viewer stays
                await page.wait_text(r"runs in \S*runs \(newest first", 15)
                assert len(viewers(served.proc.pid)) == 1
            finally:
                await browser.close()
        asyncio.run(in_the_browser())
        wait_for(lambda: viewers(served.proc.pid) == [], 15, "end of the closed tab's viewer")
        kids = psutil.Process(served.proc.pid).children(recursive=True)
        assert served.stop() == 0
        assert not [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
        assert "Traceback" not in (served.proc.stderr.read() if served.proc.stderr else "")
    finally:
        if served.proc.poll() is None:
            served.stop()


@pytest.mark.timeout(120)
def test_a_live_run_in_a_tab_is_followed_and_stopped_only_after_s_and_yes(tmp_path):
    p = ddptui("--detach", *ENDLESS, runs_dir=tmp_path / "runs", timeout=60)
    assert p.returncode == 0, p.stderr
    run, pid = Path(p.stdout.splitlines()[0][5:]), int(p.stdout.splitlines()[1].split()[-1])
    engine = psutil.Process(pid)
    served = Served(run)
    try:
        url = served.wait_url()

        async def in_the_browser() -> None:
            browser = Browser(CHROMIUM)
            try:
                page = await browser.page()
                await page.call("Page.navigate", url=url)
                await page.wait_text(r"· live ·(?s:.*)rank 1 · pid(?s:.*)step \d+ loss", 60)  # followed: each rank's steps
                await page.press("s")
                await page.wait_text("Stop every rank of this run", 10)
                await page.press("n")
                await page.wait_text(r"· live ·", 10)
                assert control.state_of(run).state == "live" and engine.is_running()  # no, and nothing stopped
                await page.press("s")
                await page.wait_text("Stop every rank of this run", 10)
                await page.press("y")
                await page.wait_text(r"■ stopped", 60)  # the engine stopped the run; the tab shows its end
            finally:
                await browser.close()
        asyncio.run(in_the_browser())
        engine.wait(30)
        summary = (run / "summary.json").read_text()
        assert '"status": "stopped"' in summary
        assert served.stop() == 0
    finally:
        if served.proc.poll() is None:
            served.stop()
        if engine.is_running():
            for c in engine.children(recursive=True) + [engine]:
                try:
                    c.kill()
                except psutil.Error:
                    pass
