"""Headless Chromium driven over the DevTools protocol (a tiny client on aiohttp's websocket): opens `ddptui serve`'s
page, reads the text its xterm.js terminal shows, presses keys in the page, takes screenshots (tests and bench/)."""
from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

# Before the page's scripts run: textual.js keeps its terminal object to itself; the first object given a fitAddon
# (that terminal, in its constructor) is kept as window.__ddptuiTerm, whose xterm buffer then reads as text.
CAPTURE = """
Object.defineProperty(Object.prototype, "fitAddon", {configurable: true, set(v) {
  Object.defineProperty(this, "fitAddon", {value: v, writable: true, configurable: true, enumerable: true});
  if (!window.__ddptuiTerm) window.__ddptuiTerm = this;
}});
"""
SCREEN_TEXT = """(() => { const t = window.__ddptuiTerm && window.__ddptuiTerm.terminal; if (!t) return "";
  const b = t.buffer.active, out = [];
  for (let y = 0; y < t.rows; y++) { const l = b.getLine(b.viewportY + y); out.push(l ? l.translateToString(true) : ""); }
  return out.join("\\n"); })()"""
# Resolves once what the terminal shows differs from `before` (checked after each write xterm parsed): the time a
# keypress takes to come back drawn.
CHANGED = """(before) => new Promise((resolve) => { const t = window.__ddptuiTerm.terminal;
  const text = () => { const b = t.buffer.active, out = [];
    for (let y = 0; y < t.rows; y++) { const l = b.getLine(b.viewportY + y); out.push(l ? l.translateToString(true) : ""); }
    return out.join("\\n"); };
  if (text() !== before) { resolve(true); return; }
  const d = t.onWriteParsed(() => { if (text() !== before) { d.dispose(); resolve(true); } }); })"""

NAMED_KEYS = {"Enter": ("\r", 13)}  # a key by its DOM name: (what it types, its key code, which xterm.js reads)


def chromium() -> tuple[str | None, str]:
    """Debian's chromium (scripts/chromium-deps.sh, `make chromium-deps`), or None and why not."""
    path = shutil.which("chromium")
    if path is None:
        return None, "no chromium: `make chromium-deps` installs Debian's (needs root and apt-get)"
    return path, ""


class Page:
    """One page target of a headless Chromium (started by `open_browser`)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future] = {}
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        """Each answer to the call that asked it (calls may overlap: one awaits a promise while keys are sent)."""
        async for msg in self.ws:
            data = json.loads(msg.data)
            f = self.waiting.pop(data.get("id", -1), None)
            if f is not None and not f.done():
                f.set_result(data)
        for f in self.waiting.values():
            if not f.done():
                f.set_exception(RuntimeError("the browser closed its DevTools socket"))

    async def call(self, method: str, **params: Any) -> dict:
        i = next(self.ids)
        f = self.waiting[i] = asyncio.get_running_loop().create_future()
        await self.ws.send_json({"id": i, "method": method, "params": params})
        data = await f
        if "error" in data:
            raise RuntimeError(f"{method}: {data['error']}")
        return data.get("result", {})

    async def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        r = await self.call("Runtime.evaluate", expression=expression, awaitPromise=await_promise, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"in the page: {r['exceptionDetails']}")
        return r["result"].get("value")

    async def screen_text(self) -> str:
        return await self.evaluate(SCREEN_TEXT) or ""

    async def wait_text(self, pattern: str, timeout: float) -> str:
        """The terminal's text once `pattern` (a regex) is on it; TimeoutError with the last text otherwise."""
        end = time.monotonic() + timeout
        text = ""
        while time.monotonic() < end:
            text = await self.screen_text()
            if re.search(pattern, text):
                return text
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{pattern!r} not on the page after {timeout:g} s; it shows:\n{text}")

    async def press(self, key: str) -> None:
        """A key typed into the page (the terminal focused first): what a user's keyboard sends."""
        await self.evaluate("window.__ddptuiTerm.terminal.focus()")
        text, code = NAMED_KEYS.get(key, (key, 0))
        named = {"code": key, "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code} if code else {}
        await self.call("Input.dispatchKeyEvent", type="keyDown", key=key, text=text, unmodifiedText=text, **named)
        await self.call("Input.dispatchKeyEvent", type="keyUp", key=key, **named)

    async def press_and_wait_change(self, key: str, timeout: float = 10.0) -> float:
        """Seconds from the key sent to the terminal showing something else."""
        await self.evaluate("window.__ddptuiTerm.terminal.focus()")
        before = await self.screen_text()
        changed = asyncio.ensure_future(self.evaluate(f"({CHANGED})({json.dumps(before)})", await_promise=True))
        await asyncio.sleep(0.01)  # the listener in place before the key goes
        t0 = time.perf_counter()
        await self.call("Input.dispatchKeyEvent", type="keyDown", key=key, text=key, unmodifiedText=key)
        await asyncio.wait_for(changed, timeout)
        dt = time.perf_counter() - t0
        await self.call("Input.dispatchKeyEvent", type="keyUp", key=key)
        return dt

    async def screenshot(self, path: Path) -> bytes:
        png = base64.b64decode((await self.call("Page.captureScreenshot", format="png"))["data"])
        path.write_bytes(png)
        return png


class Browser:
    """A headless Chromium process in its own session and profile folder; `close` ends it and its children."""

    def __init__(self, exe: str, width: int = 1400, height: int = 900) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="ddptui-chromium-"))
        args = [exe, "--headless=new", "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}", "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--disable-extensions", "--mute-audio", "about:blank"]
        if os.getuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses root without it
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        self.session: aiohttp.ClientSession | None = None

    async def page(self, timeout: float = 30.0) -> Page:
        port_file = self.profile / "DevToolsActivePort"
        end = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > end:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
                raise RuntimeError(f"chromium did not open its DevTools port: {err}")
            await asyncio.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
            targets = await r.json(content_type=None)
        target = next(t for t in targets if t.get("type") == "page")
        ws = await self.session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        page = Page(ws)
        await page.call("Page.enable")
        await page.call("Page.addScriptToEvaluateOnNewDocument", source=CAPTURE)
        return page

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its helpers (zygote, renderers) share its session
        except ProcessLookupError:
            pass
        shutil.rmtree(self.profile, ignore_errors=True)


class Served:
    """`ddptui serve RUN_DIR --port 0` (or `--runs-dir RUN_DIR`, a runs folder) as a process of its own: its URL read
    from what it prints."""

    def __init__(self, run_dir: Path, extra: tuple[str, ...] = (), cwd: Path | None = None,
                 runs_dir: bool = False) -> None:
        shown = ["--runs-dir", str(run_dir)] if runs_dir else [str(run_dir)]
        self.proc = subprocess.Popen([sys.executable, "-m", "ddptui.tui.cli", "serve", *shown, "--port", "0",
                                      *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, cwd=cwd)
        self.url = ""

    def wait_url(self, timeout: float = 30.0) -> str:
        assert self.proc.stdout is not None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                break
            m = re.search(r"(http://\S+/)", line)
            if m:
                self.url = m.group(1)
                return self.url
        err = self.proc.stderr.read() if self.proc.stderr and self.proc.poll() is not None else ""
        raise RuntimeError(f"ddptui serve printed no URL (exit {self.proc.poll()}): {err}")

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, as Ctrl-C; its exit code (SIGKILL of its group past `timeout`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            raise
