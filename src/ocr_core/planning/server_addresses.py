"""The --server addresses, read once: the list the flag names and whether an address is on this machine.

The plan decides from these whether a run may start its own servers (one address, on this machine); the fleet, the
window's memory guard and the job commands read the plan's answer instead of splitting or judging the flag again.
"""

from __future__ import annotations

from urllib.parse import urlsplit

# The host names that mean this machine: a server there is one this run may start.
LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"}


def server_urls(text: str) -> list[str]:
    """The comma-separated --server URLs, each once, without a trailing slash."""
    urls: list[str] = []
    for part in text.split(","):
        url = part.strip().rstrip("/")
        if url and url not in urls:
            urls.append(url)
    return urls


def is_local(url: str) -> bool:
    """Whether `url` names this machine (a loopback or any-address host)."""
    return (urlsplit(url).hostname or "") in LOCAL_HOSTS
