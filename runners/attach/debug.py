"""Where an attached job's ranks serve PyTorch's own debug server (stacks and Flight Recorder records without ptrace or
a signal): TORCH_WORKER_SERVER_SOCKET (`@worker_main`), or what torch.distributed.debug.start_debug_server() published
in the job's TCPStore (`debug_server/rank<N>` -> http://host:port)."""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass

SERVER_THREAD = "pt_workerserver"  # the name of the C++ threads of torch's _WorkerServer in a rank (torch 2.13)
STORE_TIMEOUT = 30.0  # seconds for the store read: it imports torch in the rank's own interpreter (seconds when loaded)
FR_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # Flight Recorder is on only when one is above 0

# Run by the rank's own interpreter (its torch speaks its store's protocol, whatever the version): the published
# addresses of ranks 0..N-1, one JSON object on stdout. A read-only client: check() and get() of existing keys only.
STORE_READ = r"""
import json, site, sys
from datetime import timedelta
if sys.argv[1]:  # first: the interpreter's own site-packages may hold another torch
    sys.path.insert(0, sys.argv[1])
    site.addsitedir(sys.argv[1])
import torch.distributed as dist
host, port, world = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = dist.PrefixStore("debug_server", dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=10)))
out = {}
for r in range(world):
    if store.check([f"rank{r}"]):
        out[r] = store.get(f"rank{r}").decode("utf-8", "replace")
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Servers:
    """rank -> its debug server's address (a unix socket path or http://host:port); `said`: what was found and how,
    or why none (in words, for the launcher pane)."""

    addresses: dict[int, str]
    said: tuple[str, ...] = ()


def fr_on(env: dict) -> bool:
    """The rank keeps Flight Recorder entries (TORCH_FR_BUFFER_SIZE > 0): without, its dump is empty, no evidence."""
    for k in FR_VARS:
        try:
            if int(env.get(k, "0")) > 0:
                return True
        except ValueError:
            continue
    return False


def site_dir(maps: str) -> str:
    """The folder that holds the torch a rank has loaded (its libtorch in /proc/PID/maps): the rank's own
    site-packages, whatever venv or conda it runs from; "" when none is mapped."""
    m = re.search(r"(/\S+)/torch/lib/libtorch\S*\.so", maps)
    return m.group(1) if m else ""


def store_answer(text: str, hosts_here: set[str]) -> dict[int, str]:
    """The store read's stdout -> rank -> address; a rank on this machine is reached at localhost (torch publishes its
    host name, which need not resolve here; the server listens on every interface)."""
    try:
        got = json.loads(text.strip().splitlines()[-1]) if text.strip() else {}
    except (ValueError, IndexError):
        return {}
    out = {}
    for r, url in got.items() if isinstance(got, dict) else ():
        m = re.fullmatch(r"http://\[?([^\]/]+?)\]?:(\d+)/?", str(url))
        if not m or not str(r).isdigit():
            continue
        host = "localhost" if m.group(1) in hosts_here else m.group(1)
        out[int(r)] = f"http://{host}:{m.group(2)}"
    return out


# ---- I/O ---------------------------------------------------------------------------------------------------------

def environ(pid: int) -> dict:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    return dict(kv.split("=", 1) for kv in raw.decode("utf-8", "replace").split("\0") if "=" in kv)


def serves(pid: int) -> bool:
    """A thread of torch's _WorkerServer runs in the process (its name, from /proc: no ptrace)."""
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == SERVER_THREAD:
                    return True
    except OSError:
        pass
    return False


def _store_env(env: dict) -> dict:
    """The store read's environment: the rank's library paths (a conda torch needs them), nothing else of it."""
    keep = {k: env[k] for k in ("PATH", "LD_LIBRARY_PATH") if k in env}
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **keep}


def _interpreter(pid: int) -> tuple[str, str] | None:
    """(the rank's own interpreter, the site-packages of the torch it loaded)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/maps") as f:
            where = site_dir(f.read())
    except OSError:
        return None
    if exe.endswith(" (deleted)") or not where:
        return None
    return exe, where


def find(ranks: dict[int, int], world: int, hosts_here: set[str]) -> Servers:
    """Every rank's debug server (ranks: rank -> pid on this machine). Unix sockets from the environment; TCP servers
    from the job's store, read once through a rank's own interpreter, only when a rank runs one (its threads)."""
    addresses: dict[int, str] = {}
    said: list[str] = []
    envs = {r: environ(pid) for r, pid in ranks.items()}
    for r, env in sorted(envs.items()):
        sock = env.get("TORCH_WORKER_SERVER_SOCKET", "")
        if sock and os.path.exists(sock):
            addresses[r] = sock
    tcp = [r for r in sorted(ranks) if r not in addresses and serves(ranks[r])]
    if tcp:
        r = tcp[0]
        env, how = envs[r], _interpreter(ranks[r])
        if not env.get("MASTER_ADDR") or not env.get("MASTER_PORT", "").isdigit():
            said.append(f"rank {r} runs torch's debug server, but its MASTER_ADDR/MASTER_PORT (the store that names "
                        "it) are not in its environment")
        elif how is None:
            said.append(f"rank {r} runs torch's debug server, but its interpreter or torch could not be found to read "
                        "the job's store")
        else:
            try:
                p = subprocess.run([how[0], "-s", "-c", STORE_READ, how[1], env["MASTER_ADDR"], env["MASTER_PORT"],
                                    str(world)], capture_output=True, text=True, timeout=STORE_TIMEOUT,
                                   stdin=subprocess.DEVNULL, env=_store_env(env))
                got = store_answer(p.stdout, hosts_here) if p.returncode == 0 else {}
                if p.returncode != 0:
                    err = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
                    said.append(f"the job's store at {env['MASTER_ADDR']}:{env['MASTER_PORT']} could not be read for "
                                f"the debug servers: {err[:200]}")
                for rank, url in got.items():
                    addresses.setdefault(rank, url)
            except (OSError, subprocess.TimeoutExpired) as e:
                said.append(f"the job's store at {env['MASTER_ADDR']}:{env['MASTER_PORT']} could not be read for the "
                            f"debug servers: {e}")
    for r, addr in sorted(addresses.items()):
        via = ("TORCH_WORKER_SERVER_SOCKET" if not addr.startswith("http://")
               else "published in the job's TCPStore under debug_server/rank" + str(r))
        said.append(f"rank {r} serves torch's debug server at {addr} ({via}): its stacks and Flight Recorder records "
                    "are read there" + ("" if fr_on(envs.get(r, {})) else
                                        " (Flight Recorder is off in it: TORCH_FR_BUFFER_SIZE is not set above 0)"))
    return Servers(addresses, tuple(said))
