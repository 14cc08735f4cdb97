"""Two network namespaces joined by a veth pair, each a "host" with its own hostname and /etc/hosts, for the tests."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "198.18.0"  # a benchmarking range this machine does not use (its eth0 is in 192.0.2.0/24)
IFACE = "ve"  # the veth end in node i's namespace is named ve<i>, whatever the session's names outside

# Runs inside the node's new UTS and mount namespaces: its own hosts file and hostname, then the command itself
# (nsenter and unshare exec, and so does this shell: the Popen's pid is the command's).
_ENTER = 'h="$0"; n="$1"; shift; mount --bind "$h" /etc/hosts && hostname "$n" && exec "$@"'


class NamespacesUnavailable(RuntimeError):
    """This machine lets us be root but not make namespaced hosts (no CAP_NET_ADMIN / CAP_SYS_ADMIN, a sandbox)."""


def hosts_file_text(names: list[str]) -> str:
    lines = ["127.0.0.1 localhost"] + [f"{SUBNET}.{i + 1} {n}" for i, n in enumerate(names)]
    return "\n".join(lines) + "\n"


def cannot_make_namespaces() -> str | None:
    """Why this machine cannot give the tests namespaced hosts, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN, mount): not root"
    for tool in ("ip", "nsenter", "unshare", "mount", "hostname"):
        if shutil.which(tool) is None:
            return f"network namespaces need `{tool}` (iproute2/util-linux): not installed"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@dataclass
class NetnsHosts:
    """Namespaces <tag>-n0.. (unique per test session), node names node0.., addresses 198.18.0.1.. ."""

    tag: str
    root: Path
    count: int = 2
    names: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    made: bool = False

    def __post_init__(self) -> None:
        self.names = [f"node{i}" for i in range(self.count)]
        self.netns = [f"{self.tag}-n{i}" for i in range(self.count)]
        self.hosts_path = self.root / "hosts"

    def addr(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def create(self) -> None:
        if self.count != 2:
            raise ValueError("one veth pair joins exactly two namespaces")
        self.hosts_path.write_text(hosts_file_text(self.names))
        outside = [f"{self.tag[:12]}v{i}" for i in range(2)]  # interface names are at most 15 characters
        try:
            for ns in self.netns:
                _ip("netns", "add", ns)
            self.made = True
            _ip("link", "add", outside[0], "type", "veth", "peer", "name", outside[1])
            for i, ns in enumerate(self.netns):
                _ip("link", "set", outside[i], "netns", ns)
                _ip("-n", ns, "link", "set", outside[i], "name", f"{IFACE}{i}")
                _ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", f"{IFACE}{i}")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", f"{IFACE}{i}", "up")
        except (subprocess.CalledProcessError, OSError) as e:
            subprocess.run(["ip", "link", "del", outside[0]], capture_output=True, timeout=30)  # if never moved
            self.delete()
            detail = getattr(e, "stderr", "") or str(e)
            raise NamespacesUnavailable(f"cannot make network namespaces here: {detail.strip()}") from e
        probe = subprocess.run(self.wrap(0, ["true"]), capture_output=True, text=True, timeout=30)
        if probe.returncode != 0:
            self.delete()
            raise NamespacesUnavailable(f"cannot give a namespace its own hostname and /etc/hosts here (nsenter, "
                                        f"unshare --uts --mount, mount --bind): {probe.stderr.strip()}")

    def wrap(self, i: int, argv: list[str]) -> list[str]:
        """argv run as on node i: in its network namespace, with its hostname and hosts file."""
        return ["nsenter", f"--net=/run/netns/{self.netns[i]}", "unshare", "--uts", "--mount",
                "--propagation", "private", "sh", "-c", _ENTER, str(self.hosts_path), self.names[i], *argv]

    def set_link(self, up: bool) -> None:
        for i, ns in enumerate(self.netns):
            _ip("-n", ns, "link", "set", f"{IFACE}{i}", "up" if up else "down")

    def delete(self) -> None:
        """Deleting a namespace deletes its veth end, and the peer with it."""
        for ns in self.netns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self.made = False

    def leftover(self) -> list[str]:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
        present = {line.split()[0] for line in out.splitlines() if line.strip()}
        return [ns for ns in self.netns if ns in present]
