"""Bench rank program: prints PRINT_LINES numbered lines as fast as it can, in ~64 KB writes.

PRINT_MIX=short: ~60-byte lines; PRINT_MIX=mix: every 10th line is ~1 KB.
PRINT_STAMP_DIR: where to write rank<R>.json with the wall-clock start/end of printing.
Every line starts with "L r<rank> <seq:09d>" so a consumer can count and check what arrived.
"""
import json
import os
import sys
import time

rank = int(os.environ.get("RANK", os.environ.get("PRINT_RANK", "0")))
n = int(os.environ.get("PRINT_LINES", "100000"))
mix = os.environ.get("PRINT_MIX", "short") == "mix"
stamp_dir = os.environ.get("PRINT_STAMP_DIR", "")
LONG = "x" * 1000
BLOCK = 1000 if not mix else 200  # lines per write: ~60 KB short, ~40 KB mixed

fd = sys.stdout.fileno()
t0 = time.time()
i = 0
written = 0
while i < n:
    j = min(n, i + BLOCK)
    if mix:
        chunk = "".join(f"L r{rank} {k:09d} tokens=4096 lr=3.0e-04 gn=1.234 " + (LONG if k % 10 == 9 else "ok") + "\n"
                        for k in range(i, j))
    else:
        chunk = "".join(f"L r{rank} {k:09d} tokens=4096 lr=3.0e-04 gn=1.234 ok\n" for k in range(i, j))
    data = chunk.encode()
    view = memoryview(data)
    while view:
        w = os.write(fd, view)
        view = view[w:]
    written += len(data)
    i = j
t1 = time.time()
if stamp_dir:
    with open(os.path.join(stamp_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "t0": t0, "t1": t1, "lines": n, "bytes": written}, f)
