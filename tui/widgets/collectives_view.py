"""The Collectives tab: every rank's Flight Recorder numbers per process group, live, the laggard's rows marked."""
from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...runners.evidence import collectives as co
from ..model import RunModel

STATE_WORD = {"mismatch": "MISMATCH", "behind": "BEHIND", "waiting": "waiting", "ok": "ok"}
STATE_CLASSES = ("-mismatch", "-behind", "-waiting", "-ok")
COLUMNS = f"{'rank':>4}  {'node':<12}  {'group':<24}  {'enqueued':>8}  {'completed':>9}  {'state':<8}  pending"


def row_text(row: co.Row, node: str) -> str:
    """One row as fixed columns; a laggard's row says in words which collective the others wait in."""
    pending = row.pending
    if row.state == "behind" and row.behind_of is not None:
        pending = f"others wait in #{row.behind_of}; this rank has not entered it"
    elif row.state == "mismatch":
        pending += "  ≠ the others' call"
    return (f"{row.rank:>4}  {node[:12]:<12}  {row.group[:24]:<24}  {row.enqueued:>8}  {row.completed:>9}  "
            f"{STATE_WORD[row.state]:<8}  {pending}")


def head_text(model: RunModel, rows: list[co.Row]) -> Text:
    """The engine's finding when there is one (the words the banner says, and its fix), then the laggards; else
    that no rank lags behind."""
    t = Text(no_wrap=False)
    if not rows:
        t.append("No collective reports yet: they come from each rank's Flight Recorder once its process group "
                 "is up (profile flight_recorder: true; XLA has none).", style="dim")
        return t
    finding, fix = model.collective_finding()
    if finding:
        kind = str(finding.get("kind") or "")
        t.append(f"{kind.upper() if kind.endswith('mismatch') else 'hang'}: ", style="bold red")
        t.append(str(finding.get("sentence") or ""))
        if fix:
            t.append("\nfix: ", style="bold green")
            t.append(fix)
        if not model.laggards:
            return t
        t.append("\n")
    behind = [r for r in rows if r.state == "behind" and r.rank in model.laggards]
    if model.laggards:
        t.append("laggard: ", style="bold")
        t.append(", ".join(f"rank {r}" for r in model.laggards), style="bold red")
        where = sorted({(r.group, r.behind_of) for r in behind if r.behind_of is not None})
        if where:
            t.append("  (" + "; ".join(f"{g}: the others wait in #{s}" for g, s in where) + ")")
    else:
        t.append("no laggard: ", style="bold green")
        t.append("no rank is behind a collective another has waited in for 2 s or more")
    return t


class CollRow(Static):
    """One (rank, group) row; redrawn only when its text or state differs."""

    DEFAULT_CSS = "CollRow { height: 1; }"

    def __init__(self, key: tuple[int, str]) -> None:
        super().__init__("", classes="coll-row", markup=False)
        self.key = key
        self.shown: tuple[str, str] | None = None

    def set_row(self, text: str, state: str) -> None:
        if self.shown == (text, state):
            return
        self.shown = (text, state)
        self.update(text)
        for c in STATE_CLASSES:
            self.set_class(c == f"-{state}", c)


class CollectivesView(VerticalScroll):
    """Rows of (rank, group): last enqueued and completed, the collective pending at the frontier, laggards marked."""

    can_focus = True

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self._rows: dict[tuple[int, str], CollRow] = {}
        self._head: Text | None = None

    def compose(self):
        yield Static("", classes="coll-head")
        yield Static(COLUMNS, classes="coll-cols", markup=False)

    def show(self, model: RunModel) -> None:
        """Redraw from the model: the rows are recomputed (cheap, pure), only rows whose text changed are updated."""
        rows = co.rows(model.collectives, model.laggards, model.collective_finding()[0])
        head = head_text(model, rows)
        if self._head is None or head != self._head:
            self._head = head
            self.query_one(".coll-head", Static).update(head)
        keys = [(r.rank, r.pg) for r in rows]
        if keys != list(self._rows):  # a new rank or group (rare): the rows again, in order
            for w in self._rows.values():
                w.remove()
            self._rows = {k: CollRow(k) for k in keys}
            self.mount(*self._rows.values())
        for row in rows:
            self._rows[(row.rank, row.pg)].set_row(row_text(row, model.where(row.rank)), row.state)
