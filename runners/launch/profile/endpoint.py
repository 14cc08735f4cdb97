"""A rendezvous address as written (host:port, host:auto, [v6]:port) and whether this machine can listen there."""
from __future__ import annotations


def split_endpoint(text: str) -> tuple[str, int | str]:
    """'host:port' / 'host:auto' / 'host' / '[v6]:port' -> (host, port or 'auto'); ValueError says what is wrong."""
    host, port = text, "auto"
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError("an IPv6 address opened with '[' needs its ']'")
        host, rest = text[1:close], text[close + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError("expected ':port' after ']'")
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    if not host or any(c.isspace() for c in host):
        raise ValueError("expected host:port, host:auto or host")
    if port == "auto":
        return host, "auto"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"port {port!r} is not in 1..65535 or auto")
    return host, int(port)


def unbindable(addr: str) -> str | None:
    """Why the ranks, which all run on this machine, could not listen on addr, or None."""
    import socket

    try:
        with socket.socket() as s:  # as session.rendezvous_port binds it
            s.bind((addr, 0))
    except (OSError, UnicodeError) as exc:  # gaierror for a name that does not resolve, idna's UnicodeError
        why = getattr(exc, "strerror", None) or exc
        return f"cannot listen on {addr!r} on this machine, where every rank runs: {why}"
    return None
