"""Talks to torch's per-rank debug server on its unix socket (or at the http://host:port a rank of
torch.distributed.debug.start_debug_server() published); stdlib only, so `python3 -S -c` runs it on another node."""
# This file is both a module (runners/edge/fr_client.py imports `post`) and the program srun runs on a rank's node:
# `python3 -S -c <this file's text> HANDLER TIMEOUT SOCK...` prints one JSON line per socket, {"sock", "body"} or
# {"sock", "error"}. Keep it free of imports outside the standard library and of anything newer than Python 3.8.
from __future__ import annotations

import json
import socket
import sys
import threading
import time

MAX_BODY = 512 << 20  # a full Flight Recorder dump of 2000 entries is about 1 MB


class DebugServerError(Exception):
    """The debug server could not be reached or did not answer as HTTP 200; the message says why, in words."""


def _recv_until(sock: socket.socket, buf: bytearray, marker: bytes, deadline: float) -> int:
    while True:
        at = buf.find(marker)
        if at >= 0:
            return at
        _more(sock, buf, deadline)


def _more(sock: socket.socket, buf: bytearray, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout()
    sock.settimeout(left)
    data = sock.recv(1 << 20)
    if not data:
        raise DebugServerError("the debug server closed the connection mid-answer")
    buf += data
    if len(buf) > MAX_BODY:
        raise DebugServerError(f"the debug server's answer is over {MAX_BODY >> 20} MB")


def _read_exactly(sock: socket.socket, buf: bytearray, n: int, deadline: float) -> bytes:
    while len(buf) < n:
        _more(sock, buf, deadline)
    out = bytes(buf[:n])
    del buf[:n]
    return out


def _chunked(sock: socket.socket, buf: bytearray, deadline: float) -> bytes:
    body = bytearray()
    while True:
        at = _recv_until(sock, buf, b"\r\n", deadline)
        size = int(bytes(buf[:at]).split(b";")[0].strip() or b"0", 16)
        del buf[:at + 2]
        if size == 0:
            return bytes(body)
        body += _read_exactly(sock, buf, size, deadline)
        _read_exactly(sock, buf, 2, deadline)  # the chunk's CRLF


def _tcp(path: str):
    """(host, port) of an `http://host:port` address; None for a unix socket path."""
    if not path.startswith("http://"):
        return None
    host, _, port = path[len("http://"):].rstrip("/").rpartition(":")
    return host.strip("[]"), int(port)


def post(path: str, handler: str, timeout: float) -> bytes:
    """The body of `POST /handler/<handler>` on the debug server listening on unix socket `path`, or at `path`
    http://host:port (TCP). torch's WorkerServer answers HTTP/1.1 with Content-Length and closes the connection;
    chunked bodies are read too."""
    deadline = time.monotonic() + timeout
    try:
        tcp = _tcp(path)
    except ValueError as e:
        raise DebugServerError(f"not a debug server address: {path}") from e
    sock = None
    try:
        try:
            if tcp is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                sock.connect(path)
            else:
                sock = socket.create_connection(tcp, timeout=timeout)
        except FileNotFoundError as e:
            raise DebugServerError(f"no debug server socket {path} (the rank ended, or never started "
                                   "its server)") from e
        except ConnectionRefusedError as e:
            raise DebugServerError(f"the debug server at {path} refused the connection (its rank has ended)") from e
        sock.sendall(f"POST /handler/{handler} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
                     "Connection: close\r\n\r\n".encode("ascii"))
        buf = bytearray()
        end = _recv_until(sock, buf, b"\r\n\r\n", deadline)
        head = bytes(buf[:end]).decode("latin-1").split("\r\n")
        del buf[:end + 4]
        status = head[0].split(" ", 2)
        headers = {}
        for ln in head[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = _chunked(sock, buf, deadline)
        elif "content-length" in headers:
            body = _read_exactly(sock, buf, int(headers["content-length"]), deadline)
        else:  # the body ends when the server closes
            while True:
                try:
                    _more(sock, buf, deadline)
                except DebugServerError as e:
                    if "closed" not in str(e):
                        raise
                    break
            body = bytes(buf)
        if len(status) < 2 or status[1] != "200":
            said = body.decode("utf-8", "replace").strip().splitlines()
            raise DebugServerError(f"the debug server answered {' '.join(status[1:]) or head[0]}"
                                   + (f": {said[0][:200]}" if said else ""))
        return body
    except socket.timeout as e:
        raise DebugServerError(f"the debug server at {path} did not answer within {timeout:g} s") from e
    except (ValueError, IndexError) as e:
        raise DebugServerError(f"the debug server's answer is not HTTP as expected ({e})") from e
    except OSError as e:
        raise DebugServerError(f"the debug server at {path}: {e.strerror or e}") from e
    finally:
        if sock is not None:
            sock.close()


def post_all(paths: list, handler: str, timeout: float) -> dict:
    """path -> body (bytes) or DebugServerError, every socket asked at the same time, all within `timeout`."""
    out: dict = {}

    def one(p: str) -> None:
        try:
            out[p] = post(p, handler, timeout)
        except DebugServerError as e:
            out[p] = e

    threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 1.0)
    for p in paths:
        out.setdefault(p, DebugServerError(f"the debug server at {p} did not answer within {timeout:g} s"))
    return out


def main(argv: list) -> int:
    handler, timeout, paths = argv[0], float(argv[1]), argv[2:]
    for p, got in post_all(paths, handler, timeout).items():
        line = {"sock": p, "error": str(got)} if isinstance(got, Exception) else \
            {"sock": p, "body": got.decode("utf-8", "replace")}
        sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
