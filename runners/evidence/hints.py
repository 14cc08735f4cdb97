"""Catalogue of known messages and exit codes: each maps to an explanation and a fix, raised at most once per run."""
from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from .crash import PEER_GONE
from .parse import any_of


@dataclass(frozen=True)
class Hint:
    code: str
    title: str
    explanation: str
    fix: str


@dataclass(frozen=True)
class _Rule:
    hint: Hint
    needles: tuple[str, ...]  # lowercase substrings: the rule is looked at only when one is in the line
    pattern: re.Pattern[str] | None = None  # then, if given, this must match too


def _rule(code: str, title: str, explanation: str, fix: str, needles: tuple[str, ...], pattern: str | None = None) -> _Rule:
    return _Rule(Hint(code, title, explanation, fix), tuple(n.lower() for n in needles),
                 re.compile(pattern, re.I) if pattern else None)


RULES: tuple[_Rule, ...] = (
    # mirage tutorial, Troubleshooting
    _rule("cuda-unavailable", "CUDA / GPU runtime not available",
          "The rank asked for a GPU but torch sees none: torch.cuda.is_available() is False (a CPU-only torch, a venv "
          "missing the ROCm runtime, or `rocm-sdk init` not run, so rocjitsu's KMD interposer is absent).",
          "Install a GPU torch into the ranks' venv; for mirage re-run the install step in the active venv and run "
          "`rocm-sdk init`. Or run on the CPU: device: cpu, backend: gloo.",
          ("not compiled with cuda", "no cuda gpus", "no hip gpus", "nvidia driver", "is_available() = false",
           "is_available() is false", "doesn't have nccl built in", "processgroupnccl is only supported with gpus",
           "cuda requested", "cuda not available", "cuda is not available")),
    _rule("mirage-in-process", "Ranks crashed in mirage --in-process mode",
          "With --in-process every rank gets its own emulator and cannot share GPU memory, so multi-GPU RCCL fails and "
          "ranks SIGSEGV/SIGABRT immediately when nproc_per_node > 1.",
          "Drop --in-process (mirage.in_process: false) so the default daemon emulator is used.",
          ()),  # no message of its own: raised by for_exit(in_process=True)
    _rule("duplicate-gpu", "Two ranks on the same GPU",
          "RCCL/NCCL refuses to run two ranks on one device (`Duplicate GPU detected` / `ncclInvalidUsage` at the first "
          "collective).",
          "Give the session at least as many GPUs as ranks (mirage --gpus-per-node N) and pin each rank to "
          "`LOCAL_RANK % torch.cuda.device_count()`.",
          ("duplicate gpu detected", "ncclinvalidusage")),
    _rule("kmd-preload", "Installed mirage used instead of the workspace build",
          "`KMD preload library not found`: mirage from PATH cannot find rocjitsu's KMD interposer.",
          "Run mirage via `cargo run --` from emulation/mirage (mirage.command: [cargo, run, --quiet, --]).",
          ("kmd preload library not found",)),
    # XLA reference, key points, and the field notes
    _rule("xla-device-zero", "Every process sees xla:0: this is normal",
          "Under torch_xla.launch each process (or thread replica) addresses its own device as xla:0; the ordinal, "
          "not the device name, tells the ranks apart.",
          "Nothing to fix; use xr.global_ordinal() for the rank.",
          ("xla:0",), r"\b(all|every|each)\b.*\bxla:0\b|\bxla:0\b.*\b(all|every|each|both)\b"),
    _rule("xla-cache-shared", "XLA compilation cache shared between processes",
          "The persistent compilation cache path must be unique per process; a shared path makes processes read each "
          "other's half-written entries.",
          "Pass a per-process path: xr.initialize_cache(f'/tmp/xla_cache_{index}') (profile: xla.cache_dir).",
          ("cache",), r"(compil\w* cache|xla_cache|initialize_cache).*(in use|locked|shared|corrupt|already|exists|permission)"),
    _rule("xla-bucket-view", "XLA DDP needs gradient_as_bucket_view=True",
          "DistributedDataParallel with the XLA backend requires gradient_as_bucket_view=True.",
          "DDP(model, gradient_as_bucket_view=True). (In PJRT CPU thread mode the field notes found True gave wrong "
          "gradients: there use init_sync=False and let the replica check judge.)",
          ("gradient_as_bucket_view",)),
    _rule("xla-device-ids", "No device_ids with XLA DDP",
          "device_ids=[rank] is for CUDA; XLA assigns the device itself.",
          "Call DDP(model, gradient_as_bucket_view=True) without device_ids.",
          ("device_ids",), r"device_ids.*(xla|not supported|must be none|single-device)|(xla).*device_ids"),
    _rule("xla-rendezvous-deadlock", "XLA thread replicas deadlocked in a rendezvous",
          "On PJRT CPU the thread replicas missed the compile cache at once and compiled twin executables whose "
          "collectives wait on different rendezvous keys; XLA aborts and the launcher raises BrokenProcessPool.",
          "Set PJRT_CPU_ASYNC_CLIENT=0 (xla.async_client: false) and call torch_xla.sync() in ordinal order each step "
          "(a threading.Condition turnstile); with more devices than cores also XLA_THREAD_POOL_SIZE >= N.",
          ("threads to join the rendezvous", "brokenprocesspool", "termination timeout"),
          r"Expected \d+ threads to join the rendezvous|BrokenProcessPool|Termination timeout"),
    _rule("xla-deserialize-noise", "XLA cache 'Failed to deserialize executable': harmless",
          "The persistent compilation cache does not work on PJRT CPU; every rerun prints this once per graph and "
          "recompiles.",
          "Nothing to fix (drop xr.initialize_cache on CPU to silence it).",
          ("failed to deserialize executable",)),
    _rule("xla-torchrun-world1", "torchrun + xla:// gives world size 1 in every process",
          "Under torchrun each process's xla:// process group has world size 1 and every process calls itself rank 0: "
          "nothing is all-reduced and the replicas drift apart.",
          "Launch XLA runs with torch_xla.launch (runner: xla), not torchrun.",
          ("xla://", "world size 1", "world_size=1", "world_size 1"),
          r"xla://.*(torchrun|world.?size.?(=|:)?\s*1\b)|world.?size.?(=|:)?\s*1\b.*xla"),
    # raised by the engine (no message of their own): an XLA stall in DDP's collectives, and the replica verdict
    _rule("xla-ddp-thread-collectives", "DDP's own collectives deadlock PJRT CPU thread replicas",
          "DistributedDataParallel runs collectives of its own outside the program's step markers: the constructor's "
          "parameter shape check (_verify_param_shape_across_processes, an all gather) and initial broadcast, and the "
          "bucket rebuild before the second forward (an all reduce). On PJRT CPU the replicas are threads of one "
          "process; each runs its own executable of that collective and waits on its own rendezvous key, so none "
          "fills: XLA warns after 5 s and aborts the whole worker after its 10 s termination timeout.",
          "On PJRT CPU thread replicas: DDP(model, init_sync=False, gradient_as_bucket_view=False), skip the bucket "
          "rebuild (wrap ddp_model.reducer so that _rebuild_buckets() returns False), and make the replicas start "
          "identical yourself (xm.broadcast_master_param(model), or a seeded generator), as profiles/xla-ddp-backend.yaml's "
          "workload (runners/workloads/xla_pattern2.py) does; docs/xla.md. Real multi-process XLA (TPU) keeps DDP's "
          "defaults.",
          ()),
    _rule("replicas-differ-from-start-xla", "XLA replicas started from different weights",
          "Every replica of torch_xla.launch builds its own model; without a common seed and with no broadcast of "
          "the initial weights they start different, and averaged gradients (xm.optimizer_step) keep them different. "
          "On PJRT CPU the replicas are threads drawing, one after the other, from one shared generator.",
          "xm.broadcast_master_param(model) right after building the model (ordinal 0's weights to every replica), "
          "or torch.manual_seed(S) before building it (thread replicas: seed and build under one lock, or initialise "
          "from a private torch.Generator seeded with S).",
          ()),
    _rule("replicas-differ-from-start-ddp", "Replicas differed already at the first optimizer step, after DDP's broadcast",
          "DistributedDataParallel broadcasts rank 0's weights to every rank when it wraps the model, so replicas that "
          "differ at the first step were changed after that: init_sync=False, a checkpoint loaded on some ranks only, "
          "or weights re-initialised per rank after DDP(...).",
          "Seed, build and load the model before wrapping it in DDP, and keep init_sync=True.",
          ()),
    _rule("replicas-differ-from-start", "Replicas started from different weights",
          "The ranks built their models without a common seed and nothing broadcast rank 0's weights, so they started "
          "different and stayed different.",
          "torch.manual_seed(S) on every rank before building the model, or broadcast rank 0's weights after building "
          "it (dist.broadcast(p.data, src=0) for each parameter, or wrap the model in DistributedDataParallel).",
          ()),
    _rule("replicas-drifted", "Replicas drifted apart during training",
          "The replicas were identical at the first optimizer step but not at the end: their updates differed "
          "(gradients not averaged across ranks, a rank-dependent update, or weights changed outside the optimizer).",
          "Average the gradients every step (DDP, or all_reduce each grad and divide by the world size; XLA: "
          "xm.optimizer_step / xm.reduce_gradients), and change weights only through the optimizer or identically on "
          "every rank.",
          ()),
    # common failures
    _rule("address-in-use", "Rendezvous port already in use",
          "The master port is taken by another process: rank 0 cannot listen (EADDRINUSE) and the other ranks may "
          "connect to the foreign server and hang.",
          "Use master_port: auto (a free port), or stop whatever listens on the port (`ss -ltnp`).",
          ("eaddrinuse", "address already in use", "errno 98")),
    _rule("collective-timeout", "A collective timed out",
          "A rank waited for a peer longer than the process-group timeout: a peer is stuck elsewhere, far slower, or "
          "calls a different collective.",
          "Look at the hang verdict / stacks for the rank that is not in the collective; raise "
          "init_process_group(timeout=...) only if the peer is merely slow.",
          ("timed out waiting", "watchdog caught collective operation timeout", "collective operation timeout"),
          r"Timed out waiting \d+ms for (recv|send)|collective operation timeout"),
    _rule("store-timeout", "Not every rank joined the rendezvous",
          "The store timed out waiting for clients: some ranks never reached init_process_group (crashed before it, "
          "started late, or point at another address/port).",
          "Check the missing ranks' logs for an earlier error; check MASTER_ADDR/MASTER_PORT and WORLD_SIZE.",
          ("diststoreerror", "clients joined", "waiting for clients"),
          r"clients joined|waiting for clients|DistStoreError"),
    _rule("peer-closed", "A peer rank crashed (this rank is a victim)",
          "`Connection closed by peer` means a remote rank went away; this rank's error is a consequence.",
          "Find the rank that failed first (the crash verdict) and fix its error.",
          PEER_GONE),
    _rule("ddp-model-mismatch", "Ranks built different models",
          "DDP checks at construction that every rank has the same parameters (count and shapes); they differ.",
          "Build the model identically on every rank (same config, same code path, no rank-dependent layers).",
          ("ddp expects same model", "appears not to match sizes of the same param")),
    _rule("numpy-missing", "NumPy missing in the ranks' venv",
          "torch warns `Failed to initialize NumPy` when numpy is not installed; anything that converts to numpy fails.",
          "pip install numpy into the ranks' venv.",
          ("failed to initialize numpy", "numpy is not available")),
    _rule("debug-detail-segfault", "TORCH_DISTRIBUTED_DEBUG=DETAIL segfaults DDP here",
          "In this torch build TORCH_DISTRIBUTED_DEBUG=DETAIL makes DDP.__init__ segfault on every rank (exit -11).",
          "Unset TORCH_DISTRIBUTED_DEBUG or use INFO.",
          ("torch_distributed_debug",), r"TORCH_DISTRIBUTED_DEBUG\s*[=:]\s*['\"]?DETAIL"),
    _rule("exit-abort-no-barrier", "SIGABRT at exit: process group torn down without a barrier",
          "`terminate called without an active exception` at exit: a gloo thread was still alive when the process "
          "group was destroyed (10–30% of runs here). The training itself finished.",
          "Call dist.barrier() before dist.destroy_process_group(); judge the run by its final checks.",
          ("terminate called without an active exception",)),
    _rule("oom-kill", "Killed by the kernel's OOM killer: out of memory",
          "The machine (or the memory cgroup the rank runs in) ran out of memory and the kernel's OOM killer sent "
          "SIGKILL to the process using the most; the kernel log or the memory cgroup's OOM count says so.",
          "Lower the batch size / model size or the number of ranks, or give the machine more memory.",
          ("out of memory", "oom-kill", "oom_kill", "killed process"), r"oom.?kill|Killed process \d+|out of memory: kill"),
    # raised by the engine at the end, from a SIGKILL's memory evidence (oom.read_kill): no message of their own
    _rule("oom-kill-maybe", "Killed by SIGKILL near the memory limit: out of memory?",
          "Nothing can catch SIGKILL. The rank's memory was near the limit it ran under, where the kernel's OOM "
          "killer sends SIGKILL to the process using the most; neither the kernel log nor the memory cgroup's OOM count "
          "could be read to confirm it.",
          "If this was the kernel's OOM killer (`dmesg | grep -i 'killed process'` names its pid): lower the batch "
          "size / model size or the number of ranks, or give the machine more memory.",
          ()),
    _rule("sigkill-not-oom", "Killed by SIGKILL: not the OOM killer",
          "Nothing can catch SIGKILL. The kernel's OOM killer sends it when memory runs out, but what was read says "
          "memory did not run out (the crash verdict says what: the kernel log, the memory cgroup's OOM count, the "
          "rank's memory against its limit). Something else sent it: the program itself (os.kill), `kill -9`, a job "
          "scheduler or a watchdog.",
          "Find the sender: the rank's last lines say what it was doing; look for whatever kills with -9 on this "
          "machine or job (using less memory would not help).",
          ()),
    _rule("sigkill", "Killed by SIGKILL: sender unknown",
          "Nothing can catch SIGKILL. The kernel's OOM killer sends it when memory runs out, and so do `kill -9`, a job "
          "scheduler, a watchdog and a program that kills itself; nothing read here says which (the crash verdict "
          "gives the rank's memory where it was sampled).",
          "Find the sender: `dmesg | grep -i 'killed process'` names a pid the OOM killer chose; else the rank's last "
          "lines and whatever manages the machine or job.",
          ()),
)

# a SIGKILL's memory reading (oom.Reading.level) -> the hint it supports
_KILL_HINTS = {"oom": "oom-kill", "near": "oom-kill-maybe", "not oom": "sigkill-not-oom", "far": "sigkill-not-oom",
               "unknown": "sigkill"}

_BY_CODE = {r.hint.code: r.hint for r in RULES}

# the multi-GPU-over-the-daemon-emulator hang has no message of its own: the engine raises it on a stall under mirage
MIRAGE_MULTI_GPU_HANG = Hint(
    "mirage-multigpu-hang", "Known mirage limitation: multi-GPU DDP hangs after a few steps",
    "Over the daemon emulator RCCL initialises and a single collective completes (dist_smoke passes), but DDP's "
    "repeated, bucketed collectives stall on a later one.",
    "Known limitation: run multi-GPU DDP on the CPU (gloo) or train single-rank on mirage.")
_BY_CODE[MIRAGE_MULTI_GPU_HANG.code] = MIRAGE_MULTI_GPU_HANG

# a restarted attempt whose ranks cannot connect: torch 2.13's agent store outlives torchrun's restarts (no per-attempt
# prefix for its workers), so a rank may read the address its peer had in the last attempt; the engine raises it when an
# attempt after a restart fails in gloo's connectFullMesh (runners/judge/attempts.py)
RESTART_STALE_STORE = Hint(
    "restart-stale-store", "A restarted attempt read the last attempt's addresses",
    "torchrun's agent keeps one store across restarts and its workers connect to it without a per-attempt prefix (torch "
    "2.13), so a restarted rank can read the address its peer had in the last attempt: gloo's connectFullMesh is "
    "refused (or hangs) in init_process_group. The static rendezvous always does this; --standalone when the ranks "
    "start unevenly.",
    "Prefix the program's store with the attempt: init_process_group(backend, store=PrefixStore(f\"attempt"
    "{os.environ['TORCHELASTIC_RESTART_COUNT']}\", TCPStore(MASTER_ADDR, MASTER_PORT, is_master=False)), rank=RANK, "
    "world_size=WORLD_SIZE), and use --standalone or --rdzv-backend c10d.")
_BY_CODE[RESTART_STALE_STORE.code] = RESTART_STALE_STORE
STALE_STORE_NEEDLE = "connectFullMesh failed"


def by_code(code: str) -> Hint:
    return _BY_CODE[code]


def all_hints() -> list[Hint]:
    return list(_BY_CODE.values())


class HintMatcher:
    """Matches log lines against the catalogue; each hint is returned at most once per matcher (one per run)."""

    def __init__(self, rules: tuple[_Rule, ...] = RULES):
        # one flat (needle, rule) list: a plain substring loop is the cheapest prefilter for every log line
        self._flat = [(n, r) for r in rules for n in r.needles]
        self.seen: set[str] = set()
        self._xla0: set[int] = set()
        self._scanner_for: int | None = None

    def _give(self, hint: Hint) -> Hint | None:
        if hint.code in self.seen:
            return None
        self.seen.add(hint.code)
        self._flat = [(n, r) for n, r in self._flat if r.hint.code != hint.code]
        return hint

    def feed(self, rank: int | None, line: str) -> Hint | None:
        low = line.lower()
        if rank is not None and "xla:0" in low and "xla-device-zero" not in self.seen:
            # two different ranks both printing xla:0 is the thing users mistake for a bug
            self._xla0.add(rank)
            if len(self._xla0) > 1:
                return self._give(by_code("xla-device-zero"))
        for needle, rule in self._flat:
            if needle in low and (rule.pattern is None or rule.pattern.search(line)):
                return self._give(rule.hint)
        return None

    def feed_many(self, rank: int | None, lines: list[str], blob: str | None = None) -> list[tuple[str, Hint]]:
        """(line, hint) for a batch: one multi-pattern scan of the whole batch, lines looked at only on a hit."""
        if not self._flat and "xla-device-zero" in self.seen:
            return []
        text = ("\n".join(lines) if blob is None else blob).encode("utf-8", "replace").lower()
        if not self._batch_hit(text):
            return []
        out = []
        for ln in lines:
            h = self.feed(rank, ln)
            if h is not None:
                out.append((ln, h))
        return out

    def _batch_hit(self, data: bytes) -> bool:
        if self._scanner_for != len(self._flat):
            self._scanner = any_of(sorted({n for n, _ in self._flat} | {"xla:0"}))
            self._scanner_for = len(self._flat)
        return self._scanner(data)

    def for_exit(self, rank: int | None, returncode: int, completed: bool = False, in_process: bool = False,
                 env: Mapping[str, str] | None = None) -> Hint | None:
        """A hint from an exit status: -11/-6 (SIGSEGV/SIGABRT). A SIGKILL's waits for the end: `for_kill`.

        completed: the rank had finished its work (an exit-time SIGABRT); in_process: mirage --in-process mode;
        env: the rank's environment (TORCH_DISTRIBUTED_DEBUG=DETAIL segfaults DDP in this torch build).
        """
        sig = -returncode if returncode < 0 else (returncode - 128 if returncode > 128 else 0)
        if sig in (signal.SIGSEGV, signal.SIGABRT):
            if in_process:
                return self._give(by_code("mirage-in-process"))
            if sig == signal.SIGSEGV and (env or {}).get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
                return self._give(by_code("debug-detail-segfault"))
            if sig == signal.SIGABRT and completed:
                return self._give(by_code("exit-abort-no-barrier"))
        return None

    def for_kill(self, reading) -> Hint | None:
        """The hint a SIGKILL's memory reading (oom.Reading) supports: use less memory only where memory was short, or
        near its limit; where it was not, find who sent the signal."""
        return self._give(by_code(_KILL_HINTS[reading.level]))

    def raise_code(self, code: str) -> Hint | None:
        """A hint the engine decided on itself (e.g. ``mirage-multigpu-hang`` on a stall under mirage)."""
        return self._give(by_code(code))
