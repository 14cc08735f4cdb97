"""How much of each rank's history the model keeps: budgets shared over the ranks, so memory stays bounded at any world."""
from __future__ import annotations

LINE_BUDGET = 128_000  # log lines kept over all ranks (about 170 bytes each with their tuple): pane tails and zoom read these
LOSS_BUDGET = 128_000  # loss points kept over all ranks (about 110 bytes each)
STEP_BUDGET = 16_000  # step times kept over all ranks in their recent windows (one a step read: the whole run thins the rest)
STEP_POINTS = 1_000  # a rank's at most: about 4 minutes of engine turns
# buckets of the whole-run histories over all ranks, per series (loss, step time): 72 bytes each, up to 4 points drawn
# from each (tui/history.py); 256 a rank up to 64 ranks, 16 at 1,024 (whose chart draws min / median / max in ~60 bins)
WHOLE_BUDGET = 16_384
WHOLE_BUCKETS = 256


def kept_per_rank(ranks: int, budget: int, most: int, least: int = 100) -> int:
    """Per-rank retention: `most` (the model's default) until `ranks` × most passes `budget`, then the budget shared,
    never below `least`: 2,000 lines each up to 64 ranks, 125 each at 1,024."""
    if ranks <= 0:
        return most
    return max(least, min(most, budget // ranks))
