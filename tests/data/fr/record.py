"""Records the Flight Recorder dumps in this folder (run by hand, not by the tests): one plain gloo fixture per case
under torchrun with TORCH_FR_BUFFER_SIZE=64, every rank dumping _dump_fr_trace_json() from a helper thread a few
seconds into the hang (a sitecustomize put on PYTHONPATH for the recording only), then the job is killed.
The nccl_timeout/ cases stand in for what NCCL's watchdog writes on a timeout (TORCH_NCCL_DUMP_ON_TIMEOUT=1): the same
Flight Recorder pickle (_dump_fr_trace, collectives and stack traces in), one file per rank named prefix + rank
(TORCH_FR_DUMP_TEMP_FILE=<dir>/nccl_trace_rank_), written here by the same helper thread over gloo (no GPU).

    .venv/bin/python tests/data/fr/record.py [CASE ...]
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "fixtures")
CASES = {  # case -> (fixture, nproc, env)
    "rank_conditional_barrier": ("rank_conditional_barrier.py", 2, {}),
    "skip_one_allreduce": ("skip_one_allreduce.py", 2, {}),
        "subgroup_hang": ("subgroup_hang.py", 4, {}),
    "hang_ddp": ("hang_ddp.py", 2, {"HANG_RANK": "1", "HANG_STEP": "3"}),
    "dtype_differs": ("allreduce_dtype_differs.py", 2, {"DIFFERS": "dtype", "FR_AT_DESTROY": "1"}),
    "shape_differs": ("allreduce_dtype_differs.py", 2, {"DIFFERS": "shape", "FR_AT_DESTROY": "1"}),
    # dumped as each rank calls destroy_process_group: every collective complete
    "healthy": ("pause_then_resume_ddp.py", 2, {"PAUSE_SECONDS": "0", "STEPS": "3", "FR_AT_DESTROY": "1"}),
    # NCCL's own dump at a timeout, as pickles: rank 1 sleeps before the all_reduce rank 0 waits in; rank 1 skips one
    "nccl_timeout/gloo_timeout": ("gloo_timeout.py", 2, {"PG_TIMEOUT": "60", "LATE_BY": "60", "FR_NCCL": "1"}),
    "nccl_timeout/skip_one_allreduce": ("skip_one_allreduce.py", 2, {"FR_NCCL": "1"}),
}
DUMPER = '''
import json, os, threading, time
def _at_destroy():
    import sys
    while "torch.distributed" not in sys.modules or not hasattr(sys.modules["torch.distributed"], "destroy_process_group"):
        time.sleep(0.01)
    dist = sys.modules["torch.distributed"]
    orig = dist.destroy_process_group
    def destroy(*a, **k):
        _write()
        return orig(*a, **k)
    dist.destroy_process_group = destroy
def _dump():
    import sys
    while "torch" not in sys.modules:
        time.sleep(0.1)
    import torch
    seen, still = None, 0
    while still < float(os.environ["FR_DUMP_AFTER"]):  # seconds without a new collective anywhere: hung
        time.sleep(0.5)
        st = json.loads(torch._C._distributed_c10d._dump_fr_trace_json(includeCollectives=False)).get("pg_status")
        # (NCCL's watchdog makes every rank dump, also one that never entered a collective: FR_NCCL dumps it too)
        still = still + 0.5 if (st or os.environ.get("FR_NCCL")) and st == seen else 0
        seen = st
    _write()
def _write():
    import torch
    if os.environ.get("FR_NCCL"):  # what ProcessGroupNCCL's dumpDebuggingInfo writes: the pickle, prefix + rank
        out = os.path.join(os.environ["FR_OUT"], "nccl_trace_rank_%s" % os.environ["RANK"])
        with open(out + ".tmp", "wb") as f:
            f.write(torch._C._distributed_c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=True,
                                                              onlyActive=False))
        os.rename(out + ".tmp", out)
        return
    d = torch._C._distributed_c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
    out = os.path.join(os.environ["FR_OUT"], "rank_%s.json" % os.environ["RANK"])
    with open(out + ".tmp", "w") as f:
        json.dump(json.loads(d), f, indent=1, sort_keys=True)
    os.rename(out + ".tmp", out)
if os.environ.get("RANK") is not None and os.environ.get("FR_OUT"):
    threading.Thread(target=_at_destroy if os.environ.get("FR_AT_DESTROY") else _dump, daemon=True).start()
'''


def record(case: str) -> None:
    fixture, nproc, env = CASES[case]
    out = os.path.join(HERE, case)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    with tempfile.TemporaryDirectory() as site:
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write(DUMPER)
        e = {**os.environ, **env, "PYTHONPATH": site, "TORCH_FR_BUFFER_SIZE": "64", "FR_OUT": out,
             "FR_DUMP_AFTER": "4", "OMP_NUM_THREADS": "1"}
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        p = subprocess.Popen([torchrun, "--standalone", f"--nproc_per_node={nproc}", os.path.join(FIXTURES, fixture)],
                             env=e, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 60
        while time.time() < deadline and len(_dumps(out)) < nproc:
            if p.poll() is not None:
                break
            time.sleep(0.2)
        import psutil  # torchrun starts each worker in a session of its own: kill them by pid
        if p.poll() is None:
            for c in psutil.Process(p.pid).children(recursive=True):
                c.kill()
            os.killpg(p.pid, signal.SIGKILL)
        log = p.communicate()[0]
    with open(os.path.join(out, "run.log"), "w") as f:
        f.write(log)
    got = _dumps(out)
    print(case, got, f"(torchrun exit {p.returncode})")
    for n in got:
        if n.startswith("nccl_trace_rank_"):
            import pickle
            with open(os.path.join(out, n), "rb") as f:
                d = pickle.load(f)
        else:
            d = json.load(open(os.path.join(out, n)))
        print("  ", n, d.get("pg_status"), len(d.get("entries", [])))


def _dumps(out: str) -> list[str]:
    return sorted(n for n in os.listdir(out) if n.endswith(".json") or
                  (n.startswith("nccl_trace_rank_") and not n.endswith(".tmp")))


if __name__ == "__main__":
    for c in sys.argv[1:] or CASES:
        record(c)
