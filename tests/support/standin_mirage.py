#!/usr/bin/env python3
"""STAND-IN for AMD's `mirage run` (ROCm/rocm-systems emulation/mirage): same CLI and process contract, no GPU emulation.

What it copies from the real one (ctl/src/lib.rs RunArgs, ctl/src/run.rs, supervisor/src/spec.rs, output.rs):
- `run [--profile P] [--num-nodes M] [--gpus-per-node N] [--nproc-per-node K] [--env K=V]... [--in-process]
  [--daemon|--attach] [--workdir D] [--clear-env-vars] -- CMD...`; bad `--env` or unknown flags exit 2 before
  anything starts (clap's usage exit code).
- CMD is started WITHOUT a shell, once per process slot (M nodes x K per node), in --workdir or the current
  folder, with the caller's environment, then the `--env` pairs, then mirage's own identity variables, which
  `--env` cannot override (warned): MIRAGE_SESSION, MIRAGE_RANK (node), RANK (global), LOCAL_RANK, WORLD_SIZE,
  MIRAGE_HEAD_ADDR/PORT and their aliases MASTER_ADDR/MASTER_PORT (same literal address on every rank),
  NCCL_HOSTID=mirage-node-<node>.
- One process: it gets mirage's stdout/stderr untouched. Several: every line is captured and written to the
  same stream prefixed `[<global rank>] `, whole lines only.
- First SIGINT/SIGTERM/SIGHUP is forwarded to the workload; a second one terminates it (TERM, then KILL).
- Exit status: the workload's (the worst of several; 128+N for a signal).
What it does not do: emulate GPUs, read mirage profiles, or fail like `--in-process` does with several ranks.
Extra, for tests only: with MIRAGE_STANDIN_RECORD=<file> it writes how it was invoked there as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid

OWNED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NCCL_HOSTID")
HEAD_ADDR = "127.0.0.1"
TERM_GRACE = 3.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mirage run", add_help=True)
    p.add_argument("--profile", default="mi350x")
    p.add_argument("--emulator")
    p.add_argument("--num-nodes", type=int, default=None)
    p.add_argument("--gpus-per-node", type=int, default=None)
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=None)
    p.add_argument("--workdir")
    p.add_argument("--env", action="append", default=[], dest="envs")
    p.add_argument("--daemon", "--attach", action="store_true")
    p.add_argument("--in-process", action="store_true")
    p.add_argument("--clear-env-vars", action="store_true")
    return p


def _fail(msg: str, code: int = 2) -> None:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def parse(argv: list[str]):
    if not argv or argv[0] != "run":
        _fail("the stand-in only implements `mirage run`")
    rest = argv[1:]
    if "--" in rest:
        i = rest.index("--")
        opts, cmd = rest[:i], rest[i + 1:]
    else:  # trailing_var_arg: the first word that is not an option starts the command
        opts, cmd = rest, []
    a, extra = _parser().parse_known_args(opts)
    if extra:
        if "--" in rest or extra[0].startswith("-"):
            _fail(f"unexpected argument '{extra[0]}' found")
        cmd = extra
    if not cmd:
        _fail("the following required arguments were not provided: <ARGV>...")
    for n, what in ((a.num_nodes, "--num-nodes"), (a.gpus_per_node, "--gpus-per-node"), (a.nproc_per_node, "--nproc-per-node")):
        if n is not None and n < 1:
            _fail(f"invalid value '{n}' for '{what}': 0 is not in 1..4294967295")
    if a.daemon and a.in_process:
        _fail("the argument '--daemon' cannot be used with '--in-process'")
    envs = {}
    for spec in a.envs:
        key, sep, value = spec.partition("=")
        if not sep or not key:
            _fail(f"invalid --env {spec!r} (expected KEY=VALUE)", 1)
        envs[key] = value
    if a.workdir and not os.path.isdir(a.workdir):
        _fail(f"--workdir {a.workdir}: no such directory", 1)
    return a, envs, cmd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HEAD_ADDR, 0))
        return s.getsockname()[1]


def _pump(stream, out, tag: bytes, lock: threading.Lock) -> None:
    for line in iter(stream.readline, b""):
        if not line.endswith(b"\n"):
            line += b"\n"
        with lock:  # one write per labelled line, so labels never land mid-line
            out.write(tag + line)
            out.flush()
    stream.close()


def _child_setup() -> None:
    os.setpgid(0, 0)  # its own process group (Popen's process_group= is Python 3.11+; this runs on 3.10 too)
    # The real mirage reclaims a dead run's workload; here the kernel does it: we die, they get SIGTERM.
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)
    except Exception:
        pass


def main(argv: list[str]) -> int:
    a, envs, cmd = parse(argv)
    nodes = a.num_nodes or 1
    nproc = a.nproc_per_node or 1
    world = nodes * nproc
    session = "s-" + uuid.uuid4().hex[:12]
    port = _free_port()
    for key in envs:
        if key in OWNED or key.startswith("MIRAGE_"):
            print(f"mirage: WARN --env {key}=... is ignored: mirage sets {key} itself on every process, "
                  "so that every rank agrees on the shape of the job", file=sys.stderr)
    print(f"mirage: session {session}", file=sys.stderr, flush=True)
    record = os.environ.get("MIRAGE_STANDIN_RECORD")
    if record:
        with open(record, "w") as f:
            json.dump({"argv": argv, "profile": a.profile, "num_nodes": nodes, "gpus_per_node": a.gpus_per_node,
                       "nproc_per_node": nproc, "env": envs, "in_process": a.in_process, "cmd": cmd,
                       "cwd": os.getcwd(), "head_port": port}, f)

    base = {} if a.clear_env_vars else dict(os.environ)
    if a.clear_env_vars:
        for k in ("PATH", "HOME", "TERM", "USER", "LANG"):
            if k in os.environ:
                base[k] = os.environ[k]
    capture = world > 1
    lock = threading.Lock()
    children: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    interrupts = []

    def on_signal(sig, _frame):
        interrupts.append(sig)
        if len(interrupts) == 1:
            print(f"mirage: {signal.Signals(sig).name}: asked the workload to stop; "
                  "interrupt again to stop waiting for it", file=sys.stderr, flush=True)
            _signal(children, sig)
        elif len(interrupts) == 2:
            print("mirage: not waiting any longer; stopping the workload", file=sys.stderr, flush=True)
            _signal(children, signal.SIGTERM)
            threading.Timer(TERM_GRACE, _signal, (children, signal.SIGKILL)).start()
        else:
            _signal(children, signal.SIGKILL)

    # before the first child starts: no signal may fall between a spawn and its handler
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for sig in handled:
        signal.signal(sig, on_signal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, handled)  # a mask inherited from whoever started us does not hold them

    for node in range(nodes):
        for local in range(nproc):
            rank = node * nproc + local
            env = {**base, **envs, "MIRAGE_SESSION": session, "MIRAGE_RANK": str(node), "RANK": str(rank),
                   "LOCAL_RANK": str(local), "WORLD_SIZE": str(world), "MIRAGE_HEAD_ADDR": HEAD_ADDR,
                   "MIRAGE_HEAD_PORT": str(port), "MASTER_ADDR": HEAD_ADDR, "MASTER_PORT": str(port),
                   "NCCL_HOSTID": f"mirage-node-{node}", "MIRAGE_STANDIN": "1"}
            pipe = subprocess.PIPE if capture else None
            try:
                child = subprocess.Popen(cmd, env=env, cwd=a.workdir or None, stdin=subprocess.DEVNULL,
                                         stdout=pipe, stderr=pipe, preexec_fn=_child_setup)
            except OSError as e:
                print(f"Error: failed to spawn {cmd[0]}: {e.strerror or e}", file=sys.stderr)
                _signal(children, signal.SIGKILL)
                return 1
            children.append(child)
            if interrupts:  # asked to stop while the grid was still being started
                _signal([child], interrupts[0])
            if capture:
                tag = f"[{rank}] ".encode()
                for src, dst in ((child.stdout, sys.stdout.buffer), (child.stderr, sys.stderr.buffer)):
                    t = threading.Thread(target=_pump, args=(src, dst, tag, lock), daemon=True)
                    t.start()
                    pumps.append(t)

    codes = []
    for child in children:
        while True:  # in short waits: a signal the kernel gave another thread is handled at the next look
            try:
                rc = child.wait(timeout=0.2)
                break
            except (InterruptedError, subprocess.TimeoutExpired):
                continue
        codes.append(128 - rc if rc < 0 else rc)
    for t in pumps:
        t.join(timeout=5)
    return max(codes, default=0) & 0xFF


def _signal(children, sig) -> None:
    for c in children:
        if c.poll() is None:
            try:
                os.killpg(c.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
