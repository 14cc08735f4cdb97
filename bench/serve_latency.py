"""`make bench` section serve (--only serve): keypress -> repaint of the dashboard in a browser tab (`ddptui serve`,
headless Chromium, the key typed into the page, timed until xterm.js shows another screen) beside the same dashboard
on the same record at the same size in a terminal (Textual's headless driver, tui/latency.py: key -> next refresh).

  .venv/bin/python bench/serve_latency.py [--quick]   # the section alone, figures printed
"""
from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path

from figures import fmt3, mmm

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tests" / "fixtures" / "records" / "crash"
sys.path.insert(0, str(ROOT))  # tests.support.browser: the browser test's DevTools client


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[max(0, int(len(xs) * 0.95) - 1)]


async def _browser(record: Path, presses: int) -> dict:
    from tests.support.browser import Browser, Served, chromium
    exe, why = chromium()
    if exe is None:
        return {"not_measured": why}
    served = Served(record)
    browser = None
    try:
        url = served.wait_url()
        browser = Browser(exe)
        page = await browser.page()
        await page.call("Page.navigate", url=url)
        await page.wait_text(r"rank 1 failed first", 60)
        await asyncio.sleep(1.0)  # the replay's last batches drawn
        lat = []
        for _ in range(presses):
            lat.append(await page.press_and_wait_change("t"))
            await asyncio.sleep(0.15)  # the rest of the repaint lands before the next key
        size = await page.evaluate("[window.__ddptuiTerm.terminal.cols, window.__ddptuiTerm.terminal.rows]")
    finally:
        if browser is not None:
            await browser.close()
        served.stop()
    return {"p50_ms": round(sorted(lat)[len(lat) // 2] * 1000, 1), "p95_ms": round(p95(lat) * 1000, 1),
            "max_ms": round(max(lat) * 1000, 1), "presses": presses, "size": size}


def once(presses: int) -> dict:
    from ddptui.tui.latency import measure_latency
    with tempfile.TemporaryDirectory(prefix="ddptui-serve-bench-") as tmp:
        record = Path(tmp) / "crash"
        shutil.copytree(RECORD, record)
        web = asyncio.run(_browser(record, presses))
        if "p95_ms" not in web:
            return {"browser": web}
        cols, rows = web["size"]
        term = measure_latency(seconds=presses * 0.15, presses=presses, size=(cols, rows), follow=str(record))
    return {"browser": web, "terminal": {k: term[k] for k in ("p50_ms", "p95_ms", "max_ms")}}


def bench(cfg, work, res: dict, log, mmm) -> None:
    presses = cfg.ui_presses
    log(f"serve: keypress -> repaint in a browser tab (ddptui serve, headless Chromium) and in a terminal, "
        f"{presses} presses of t, {cfg.repeats} repeats")
    runs = []
    for i in range(cfg.repeats):
        got = once(presses)
        log(f"  repeat {i}: {got}")
        runs.append(got)
        if "terminal" not in got:
            break
    ok = [r for r in runs if "terminal" in r]
    if not ok:
        res["serve"] = runs[-1]["browser"]
        return
    d: dict = {"presses": presses, "repeats": len(ok), "size": ok[0]["browser"]["size"]}
    for kind in ("browser", "terminal"):
        d[kind] = {k: mmm([r[kind][k] for r in ok]) for k in ("p50_ms", "p95_ms")}
    d["ratio_p95"] = mmm([r["browser"]["p95_ms"] / r["terminal"]["p95_ms"] for r in ok if r["terminal"]["p95_ms"]])
    res["serve"] = d


def report(d: dict, fmt3) -> list[str]:
    L = ["## The dashboard in a browser (`ddptui serve`) beside the terminal\n"]
    if "browser" not in d:
        L.append(f"Not measured: {d.get('not_measured') or d.get('error') or d}.\n")
        return L
    L.append("`bench/serve_latency.py`: the crash record served, one tab in headless Chromium; `t` typed into the "
             "page (DevTools `Input.dispatchKeyEvent`) until xterm.js shows another screen (its text read after each "
             "write it parsed): the key's trip through the server's websocket, the tab's viewer process and back. "
             f"Terminal: the same record and size ({d['size'][0]}x{d['size'][1]}) in Textual's headless driver "
             "(`tui/latency.py`), key -> the next refresh.\n")
    L.append("| | browser tab | terminal | ratio browser / terminal |\n|---|---|---|---|")
    L.append(f"| keypress -> repaint p95 | {fmt3(d['browser']['p95_ms'], 1, ' ms')} | "
             f"{fmt3(d['terminal']['p95_ms'], 1, ' ms')} | **{fmt3(d['ratio_p95'], 2)}** |")
    L.append(f"| p50 | {fmt3(d['browser']['p50_ms'], 1, ' ms')} | {fmt3(d['terminal']['p50_ms'], 1, ' ms')} | |")
    L.append("")
    return L



if __name__ == "__main__":
    from types import SimpleNamespace
    quick = "--quick" in sys.argv
    cfg = SimpleNamespace(ui_presses=10 if quick else 30, repeats=1 if quick else 3)
    res: dict = {}
    bench(cfg, None, res, lambda s: print(s, flush=True), mmm)
    print(json.dumps(res))
    print("\n".join(report(res["serve"], fmt3)))
