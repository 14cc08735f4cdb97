"""compare's reader of several records: one forked process a large record gives the figures (and problems) that
reading them one after the other gives; a path that is no record is the same one-line NotARecord either way."""
from __future__ import annotations

import pytest

from ddptui.runners import events as ev
from ddptui.runners.edge.record import RunRecord
from ddptui.tui import compare_read, compare_table
from ddptui.tui.record_tables import NotARecord

pytestmark = pytest.mark.any_python
T0 = 1_700_000_000.0


def _record(d, ranks: int, steps: int, step_s: float, cut: bool = False):
    rec = RunRecord(d)
    rec.event(ev.RunStarted(str(d), "p", "torchrun", ranks, steps, T0))
    for s in range(1, steps + 1):
        for r in range(ranks):
            jitter = ((s * 7919 + r * 104729) % 1000) / 1000
            rec.event(ev.Progress(r, s, 1.0 / s + r, T0 + 3 + s * step_s, "hook", ((s, 1.0 / s + r),), 16,
                                  step_s * (0.9 + 0.2 * jitter)))
    rec.event(ev.RunFinished("ok", 0, str(d / "summary.json"), T0 + 4 + steps * step_s, {}))
    rec.close()
    if cut:
        with open(d / "events.jsonl", "a", encoding="utf-8") as f:
            f.write('{"rank": 0, "step": 9')
    return d


def test_records_read_in_processes_give_what_one_after_the_other_gives(tmp_path, monkeypatch):
    monkeypatch.setattr(compare_read.os, "cpu_count", lambda: 2)
    paths = [str(_record(tmp_path / "a", 2, 300, 0.1)), str(_record(tmp_path / "b", 4, 200, 0.2, cut=True))]
    apart = compare_read.read_all(paths, large_bytes=0)
    serial = compare_read.read_all(paths, large_bytes=1 << 60)
    assert apart == serial
    assert [f.ranks for f, _ in apart] == [2, 4] and apart[0][0].steps == 300
    assert apart[0][1] == [] and any("cut short" in p for p in apart[1][1])
    table = compare_table.table_lines(compare_table.compare_figures([f for f, _ in apart]))
    assert any(line.startswith("loss at step 200") for line in table)
    with pytest.raises(NotARecord, match="not a ddptui run record"):
        compare_read.read_all([*paths, str(tmp_path)], large_bytes=0)
