"""Every verdict a run had, as the dashboard says them (a node lost, the crash, a stall now or over, a slow-down), kept
once the run is over: the banner, the Verdict tab and the Hints tab read this one list. Pure: no textual."""
from __future__ import annotations

from dataclasses import dataclass

from ..runners.evidence.words import ranks_text
from .marks import FAILED, WARN
from .model import RunModel

TITLES = {"node lost": "node lost", "crash": "crash", "stall": "stall", "stall over": "stall (over: the ranks moved on)",
          "slow": "slow-down", "diverged": "replicas diverged"}


@dataclass(frozen=True)
class Said:
    """One verdict: its kind (a key of TITLES), the engine's sentence and the engine's fix line ("" when none)."""

    kind: str
    text: str
    fix: str = ""

    @property
    def mark(self) -> str:
        return FAILED if self.kind in ("node lost", "crash", "diverged") else WARN

    @property
    def title(self) -> str:
        return TITLES[self.kind]


def slow_text(model: RunModel) -> str:
    """The slow-down in words: each slow rank's numbers the stack sample does not already name, then the sample's
    sentence; kept after the slow ranks exit (RankView.slowed). "" when nothing slowed."""
    sample = model.slow  # the engine's stack sample of the slowed run: its sentence names the culprits' numbers
    named = set(sample.culprits) if sample is not None else set()
    ranks = [f"rank {r}: {v.slowed}" for r, v in sorted(model.ranks.items()) if v.slowed and r not in named]
    return " · ".join(ranks + ([sample.text] if sample is not None else []))


def said(model: RunModel) -> list[Said]:
    """The run's verdicts so far, the cause first: nodes lost, the crash, the stall (now, or one that ended), replicas
    that diverged while it ran, the slow-down. The replica verdict and a preflight refusal have their own lines."""
    out = [Said("node lost", f"{n.node} ({ranks_text(n.ranks, empty='no ranks')}): {n.why}") for n in model.lost]
    if model.crash is not None:
        out.append(Said("crash", f"{model.crash.exit}: {model.crash.text}"))
    if model.stall is not None:
        hv = model.stall_hang
        if hv is not None:
            out.append(Said("stall", hv.text, hv.fix))
        else:
            s = model.stall
            out.append(Said("stall", f"{ranks_text(s.stalled, empty='no ranks')}: {s.reason or f'made no progress for {s.threshold:g}s'}"))
    elif model.hang is not None:
        out.append(Said("stall over", model.hang.text, model.hang.fix))
    if model.diverged is not None:  # the live check's; the end's replica verdict has its own line
        out.append(Said("diverged", model.diverged.text))
    slow = slow_text(model)
    if slow:
        out.append(Said("slow", slow, model.slow.fix if model.slow is not None else ""))
    return out
