"""The ports of a fleet: the --server URLs given, and free ports for the replicas a run spawns."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit, urlunsplit

from ..errors import CommandError

MAX_PORT = 65535


def free_ports(after: int, count: int) -> list[int]:
    """`count` loopback ports above `after` that nothing listens on now, for the replicas after the first; none
    past the last port there is (a CommandError then)."""
    ports: list[int] = []
    port = after
    while len(ports) < count:
        port += 1
        if port > MAX_PORT:
            raise CommandError(
                f"no free port above {after} for {count} more replica(s) (ports end at {MAX_PORT}): pass a --server "
                "with a lower port, such as --server http://127.0.0.1:8000, or fewer --replicas"
            )
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.hostname}:{port}"))
