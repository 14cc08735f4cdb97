"""The verdict: every verdict the run had with its fix, replica digests as parameters × ranks (first difference
highlighted) and a per-rank summary with what each rank went through."""
from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from ...runners.events import ReplicaVerdict
from ..attempt_words import timeline
from ..marks import FAILED, WARN, mark, marked
from ..model import RunModel, human_bytes
from ..verdicts import said

DIGEST_CHARS = 8


def replica_rows(rv: ReplicaVerdict) -> tuple[list[str], list[list[Text]]]:
    """Column labels and one row per parameter; cells that differ from the majority are red, the first differing row bold."""
    ranks = sorted(rv.table)
    cols = ["parameter", *[f"rank {r}" for r in ranks]]
    rows = []
    for i, name in enumerate(rv.params):
        cells = [rv.table[r][i] if i < len(rv.table[r]) else "" for r in ranks]
        counts: dict[str, int] = {}
        for c in cells:
            counts[c] = counts.get(c, 0) + 1
        majority = max(counts, key=counts.__getitem__) if counts else ""
        first = name == rv.param
        row = [Text(("▶ " if first else "  ") + name, style="bold red" if first else "")]
        for c in cells:
            bad = c != majority
            style = ("bold " if first else "") + ("red reverse" if bad else "green")
            row.append(Text(c[:DIGEST_CHARS] or "-", style=style))
        rows.append(row)
    return cols, rows


def replica_line(rv: ReplicaVerdict) -> str:
    """The replica verdict said once: its text when that already says "replicas ..." (it names the first differing
    parameter and the ranks), else "replicas <status>: <text>"."""
    return rv.text if rv.text.startswith("replicas ") else f"replicas {rv.status}: {rv.text}"


def rank_end(badge: str, outcome: str | None, returncode: int | None) -> str:
    """One status per rank: the engine's words for its end (summary.json's outcome: "stopped by ddptui", "failed
    after it") when they say more than the live badge; "exited 0" is the badge's "exited ok"."""
    if not outcome or outcome == badge or (outcome == "exited 0" and badge == "exited ok") or (
            returncode is not None and outcome == f"exited {returncode}" and badge.startswith(("exited", "failed"))):
        return badge
    return outcome


def preflight_problems(model: RunModel) -> list[dict]:
    """What kept the run from starting (summary.json's preflight: code, message, fix), [] otherwise."""
    return list((model.finished.summary.get("preflight") if model.finished else None) or [])


def own_exit(model: RunModel) -> str:
    """The engine's words for ranks that ended by an exit status of their own (summary.json's own_exit), or ""."""
    own = model.finished.summary.get("own_exit") if model.finished else None
    return str(own.get("text") or "") if isinstance(own, dict) else ""


def summary_rows(model: RunModel) -> list[list[str]]:
    """One row per rank: the model's live state, completed by RunFinished.summary's per-rank outcome."""
    per = (model.finished.summary.get("ranks") if model.finished else None) or {}
    rows = []
    for r in model.rank_ids():
        v = model.rank(r)
        info = per.get(r) or per.get(str(r)) or {}
        badge = v.badge()
        end = rank_end(badge, info.get("outcome"), v.returncode)
        end = f"{mark(badge)} {end}" if mark(badge) else end  # the badge's marker, the engine's words
        past = v.past()
        rows.append([str(r), end + (f" · {WARN} {past}" if past else ""),  # what it went through before its end
                     "-" if v.step is None else str(v.step), "-" if v.loss is None else f"{v.loss:.5g}",
                     "-" if v.cpu is None else f"{v.cpu:.0f}%", human_bytes(v.rss), str(v.pid or "-"),
                     model.where(r) or "-"])
    return rows


def headline(model: RunModel) -> Text:
    t = Text()
    f = model.finished
    if f is None:
        t.append("Run in progress: the final verdict appears when it ends; the verdicts so far:\n"
                 if said(model) else "Run in progress: the verdict appears when it ends.\n", style="dim")
    else:
        t.append(f"status: {marked(f.status)}   exit code: {f.exit_code}\n",
                 style="bold green" if f.status == "ok" else "bold red")
    if own_exit(model):
        t.append(f"exit: {own_exit(model)}\n", style="bold red")
    for v in said(model):  # every verdict the run had, whole: the banner cuts them to its rows
        t.append(f"{v.mark} {v.title}: ", style="bold red" if v.mark == FAILED else "bold yellow")
        t.append(f"{v.text}\n")
        if v.fix:
            t.append("   fix: ", style="bold green")
            t.append(f"{v.fix}\n")
    for p in preflight_problems(model):
        t.append(f"preflight: {p.get('message', '?')}\n", style="bold red")
        if p.get("fix"):
            t.append(f"   fix: {p['fix']}\n")
    if len(model.attempts) > 1:  # the launcher restarted the ranks: every attempt, how it ended
        t.append(f"attempts ({len(model.attempts)}; torchrun restarted every rank after a failure):\n", style="bold")
        for a, row in zip(model.attempts, timeline(model.attempts), strict=True):
            t.append(f"  {row}\n", style="" if a["status"] in ("ok", "running") else "yellow")
    rep = model.replica
    if rep is not None:
        t.append(f"{replica_line(rep)}\n", style="green" if rep.status == "identical" else "bold red")
    if model.job is not None:
        j = model.job
        t.append(f"slurm job {j.job_id}: {j.state}" + (f" ({j.reason})" if j.reason else "")
                 + (f" on {','.join(j.nodes)}" if j.nodes else "") + "\n")
    t.append(f"run record: {model.run_dir or '-'}\n")
    if f is not None and f.summary_path:
        t.append(f"summary: {f.summary_path}\n", style="dim")
    return t


@dataclass(frozen=True)
class VerdictShown:
    """What the Verdict tab draws, as values: it redraws only when they differ."""

    head: Text  # headline(model): the status, replicas and record lines
    summary: tuple  # summary_rows(model), rows as tuples
    replica: ReplicaVerdict | None


def verdict_shown(model: RunModel) -> VerdictShown:
    return VerdictShown(headline(model), tuple(map(tuple, summary_rows(model))), model.replica)


class VerdictView(VerticalScroll):
    """Shows ``shown`` = verdict_shown(model)."""

    shown: reactive[VerdictShown | None] = reactive(None, repaint=False, init=False)

    def compose(self) -> ComposeResult:
        yield Static(headline(RunModel()), classes="verdict-head")
        yield Static("per-rank summary", classes="section")
        yield DataTable(id="summary-table", cursor_type="row", zebra_stripes=True)
        digests = Static("replica digests (parameters × ranks)", classes="section replica-head")
        digests.display = False  # only when a rank reported its digests: no heading over an empty table
        yield digests
        yield DataTable(id="replica-table", cursor_type="row")

    def on_mount(self) -> None:
        self.query_one("#summary-table", DataTable).add_columns("rank", "status", "steps", "last loss", "cpu", "rss", "pid",
                                                                  "node")

    def watch_shown(self, old: VerdictShown | None, new: VerdictShown | None) -> None:
        if new is None:
            return
        if old is None or old.head != new.head:
            self.query_one(".verdict-head", Static).update(new.head)
        if old is None or old.summary != new.summary:
            st = self.query_one("#summary-table", DataTable)
            st.clear()
            for row in new.summary:
                st.add_row(*row)
        if old is not None and old.replica == new.replica:
            return
        rep = new.replica
        rt = self.query_one("#replica-table", DataTable)
        rt.clear(columns=True)
        self.query_one(".replica-head", Static).display = rep is not None and bool(rep.params)
        if rep is not None and rep.params:
            cols, rows = replica_rows(rep)
            rt.add_columns(*cols)
            first = None
            for i, row in enumerate(rows):
                rt.add_row(*row)
                if first is None and rep.param and rep.params[i] == rep.param:
                    first = i
            if first is not None:
                rt.move_cursor(row=first)
