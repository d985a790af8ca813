"""One server a run talks to (one replica of its fleet): found or spawned at the start, restarted when it dies or
hangs, stopped at the end.

Recovery is single-flight: when many pages in flight fail together because the engine died, one recovery restarts
it and the others see the new generation number and simply retry. Where the machine plan cannot make starts safe
together (scale.py), they are serialised across the fleet by one shared lock, since two engines that profile the
memory of one GPU at once both misjudge it (one died with "No available memory for the cache blocks" on an H200);
otherwise each handle has its own. Death is decided from the process for a server
this run spawned (exited means dead, at once) and from /health over a long budget while it runs, because one failed
look at a server busy with a large window proves nothing; a hung engine is reported by the stall watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from ..console import say
from ..errors import JobFailed
from ..planning.engine_plan import ReplicaLaunch
from ..planning.server_addresses import is_local
from ..planning.server_policy import ServerPolicy
from .chat import Retryable
from .serve_log import log_tail
from .server_api import (
    NotAVllmRoot,
    ServerError,
    health_status,
    healthy,
    list_models,
    matching_model,
    served_names,
    url_port,
)
from .spawn import STOPPING, SpawnedServer, serve_command
from .startup_log import describe_timeline, startup_timeline

HF_TOKEN_HOSTS = ("huggingface.co", "hf.co")
HF_TOKEN_DOMAINS = (".huggingface.co", ".hf.co", ".hf.jobs")
HEALTH_CHECK_GAP_S = 2.0
HEALTH_CHECK_TIMEOUT_S = 20.0
DEATH_BUDGET_S = 60.0


def check_resolves(url: str) -> None:
    """Refuses a server whose host name does not resolve: no wait for /health can heal a mistyped name, and a
    server that is merely starting has an address already."""
    host = urlsplit(url).hostname or ""
    try:
        socket.getaddrinfo(host, url_port(url))
    except socket.gaierror as exc:
        raise ServerError(
            f"--server {url}: the host name {host!r} does not resolve ({exc.strerror or exc}); check the address "
            "(its spelling, and that this machine's network or VPN can see it)"
        ) from exc


def api_headers(url: str, hf_token: str | None, api_key: str | None = None) -> dict[str, str]:
    """--api-key for the --server URL the user named; else the HF token, but only where the Hub would take it.

    The Hub's own hosts and HF Jobs endpoints, over https, matched on a dot boundary: `evilhuggingface.co` and
    anyone's Space (`*.hf.space`) could otherwise collect the token of whoever points a run at them.
    """
    key = api_key
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".")
    if not key and parts.scheme == "https" and (host in HF_TOKEN_HOSTS or host.endswith(HF_TOKEN_DOMAINS)):
        key = hf_token or os.environ.get("HF_TOKEN")
    return {"Authorization": f"Bearer {key}"} if key else {}


class VllmMissing(ServerError):
    """Nothing answers at a local address and the `vllm` command is not on PATH to start a server there; the
    command line composes the advice (where the run can go instead) from it."""

    def __init__(self, url: str, named_server: bool) -> None:
        self.url = url
        self.named_server = named_server
        super().__init__(f"no vLLM server answers at {url}, and the `vllm` command is not on PATH to start one")


class StartupTimeout(ServerError):
    """A server this run did not start never answered /health within --startup-timeout."""


@dataclass
class Target:
    """Where requests go: base URL, served model name, headers (an API key for remote servers)."""

    url: str
    model: str
    headers: Mapping[str, str]


class ServerHandle:
    """One address of the fleet, held to `policy`. `launch` says how to start a server there (None: never start
    one, the user's own server); `env` is what a spawned server gets beside the launch's own variables (the engine
    cache's folders)."""

    def __init__(
        self,
        url: str,
        policy: ServerPolicy,
        launch: ReplicaLaunch | None = None,
        start_lock: threading.Lock | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.policy = policy
        self.launch = launch
        self.headers = api_headers(self.url, policy.hf_token, policy.api_key)
        self.spawned: SpawnedServer | None = None
        self.restarts = 0
        self.generation = 0
        self.lock = asyncio.Lock()
        self.start_lock = start_lock or threading.Lock()
        self.env = dict(env or {})
        self.startup: dict | None = None
        self.state = threading.Lock()
        self.closed = False

    async def open(self, spawn: bool = True) -> Target:
        """Spawns a server for a local address where none answers; checks what a server it did not start serves.
        An address whose /health answers 404 is not a vLLM root: refused at once, since waiting cannot fix it."""
        status = self.health()
        if status == 404:
            raise NotAVllmRoot(self.url, "/health")
        if status != 200:
            if spawn and self.launch is not None and is_local(self.url):
                await asyncio.to_thread(self.spawn)
                return Target(self.url, self.spawned_name(), self.headers)
            check_resolves(self.url)
            say(f"waiting up to {self.policy.startup_timeout:.0f} s for {self.url} to answer /health")
            if not await self.poll_health(self.policy.startup_timeout, at_start=True):
                raise StartupTimeout(f"{self.url} did not answer /health within {self.policy.startup_timeout:.0f} s")
        return Target(self.url, self.check_reused(), self.headers)

    def health(self) -> int | None:
        """What /health answers at this address now (None: nothing answers)."""
        return health_status(self.url, self.headers)

    def answering(self) -> bool:
        """Whether a server already answers /health at this address (then `open` uses it rather than start one)."""
        return healthy(self.url, self.headers)

    def spawned_name(self) -> str:
        assert self.spawned is not None
        names = served_names(self.spawned.argv)
        return names[0] if names else self.policy.model

    def check_reused(self) -> str:
        """The model name to request from a server this run did not start; refuses one that cannot do this job."""
        entries = list_models(self.url, self.headers)
        entry = matching_model(entries, self.policy.model, self.policy.recipe_names)
        if entry is None:
            raise ServerError(mismatch_message(self.url, self.policy.model, [item["id"] for item in entries]))
        served_len = entry.get("max_model_len")
        say(f"{self.url} serves {entry['id']} (max_model_len {served_len or 'not given'}); this run did not start it")
        for note in unapplied_flags(self.policy, served_len):
            say(note)
        max_tokens = self.policy.max_tokens
        if isinstance(served_len, int) and max_tokens is not None and served_len <= max_tokens:
            raise ServerError(
                f"{self.url} serves max_model_len {served_len}, at or below --max-tokens {max_tokens}, so no page "
                f"would fit (its image needs room too). Pass a --max-tokens well below {served_len}, or restart "
                "that server with a larger --max-model-len"
            )
        return entry["id"]

    def spawn(self) -> None:
        launch = self.launch
        if launch is None:
            raise ServerError(f"{self.url} is the user's own server, which this run never starts")
        if shutil.which("vllm") is None:
            raise VllmMissing(self.url, self.policy.named_server)
        port = url_port(self.url)
        server = SpawnedServer(
            serve_command(self.policy.model, launch.flags, port),
            self.url,
            env=launch.environment(self.env),
            log_path=Path(tempfile.gettempdir()) / f"vllm-serve-{port}.log",
            api_servers=launch.api_servers,
        )
        with self.state:
            if self.closed:
                raise ServerError(STOPPING)
            self.spawned = server
        gpu = f" on GPU {launch.gpu}" if launch.gpu is not None else ""
        asked_at = time.time()
        with self.start_lock:
            say(f"starting{gpu}: {shlex.join(server.argv)}")
            say(f"server log: {server.log_path}")
            server.start()
            server.wait_ready(self.policy.startup_timeout)
        self.startup = {
            "waited_s": round(server.launched_at - asked_at, 1),
            **startup_timeline(server.log_of_this_start(), server.launched_at, time.time()),
        }
        say(f"server is ready ({self.url}); its start: {describe_timeline(self.startup)}")

    async def poll_health(
        self, seconds: float, running: Callable[[], bool] = lambda: True, at_start: bool = False
    ) -> bool:
        """Looks at /health until it answers 200 or `seconds` pass; stops early once `running` says no. `at_start`:
        a 404 is no server starting up but something else at that address (NotAVllmRoot); mid-run a recovery only
        waits, and its budget decides."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        async with httpx.AsyncClient(timeout=HEALTH_CHECK_TIMEOUT_S) as client:
            while loop.time() < deadline and running():
                try:
                    status = (await client.get(f"{self.url}/health", headers=self.headers)).status_code
                except httpx.HTTPError:
                    status = None
                if status == 200:
                    return True
                if status == 404 and at_start:
                    raise NotAVllmRoot(self.url, "/health")
                await asyncio.sleep(HEALTH_CHECK_GAP_S)
        return False

    async def recover(self, error: Retryable, generation: int) -> int:
        """Restarts a dead spawned server (bounded); returns the generation the caller should retry under."""
        async with self.lock:
            if generation != self.generation or not error.engine_dead:
                return self.generation
            if self.spawned is None:
                if await self.poll_health(self.policy.startup_timeout):
                    return self.generation
                raise JobFailed(f"{self.url} stopped answering ({error}) and did not come back")
            if await self.poll_health(DEATH_BUDGET_S, self.spawned.alive):
                return self.generation
            await self.restart_spawned(f"the vLLM server is down ({error})")
            return self.generation

    async def stalled(self, reason: str, generation: int) -> None:
        """The stall watcher's report: a spawned server is restarted; one this run did not start ends the job."""
        async with self.lock:
            if generation != self.generation:
                return
            if self.spawned is None:
                raise JobFailed(
                    f"the vLLM server at {self.url} answers /health, but its engine {reason}: it is hung. Restart "
                    "that server (or run without --server so that this script starts and manages its own), then "
                    "rerun the same command to resume; raise --stall-timeout only if single pages legitimately "
                    "take that long"
                )
            await self.restart_spawned(f"the vLLM engine {reason}")

    async def restart_spawned(self, why: str) -> None:
        """One bounded restart; pages in flight fail with transport errors and are retried under the new generation."""
        assert self.spawned is not None
        if self.restarts >= self.policy.max_restarts:
            raise JobFailed(
                f"{why}, and the server was already restarted {self.restarts} time(s) (--max-restarts). Last lines "
                f"of {self.spawned.log_path}:\n{log_tail(self.spawned.log_path)}"
            )
        self.restarts += 1
        say(f"{why} at {self.url}; restarting it ({self.restarts}/{self.policy.max_restarts})")
        try:
            await asyncio.to_thread(self.restart)
        except ServerError as exc:
            raise JobFailed(f"restarting the vLLM server failed: {exc}") from exc
        self.generation += 1

    def restart(self) -> None:
        assert self.spawned is not None
        self.spawned.stop()
        with self.start_lock:
            self.spawned.start()
            self.spawned.wait_ready(self.policy.startup_timeout)
        say(f"server is ready again ({self.url})")

    def close(self) -> None:
        """Stops what this run started, also while a restart runs in a worker thread; nothing starts afterwards."""
        with self.state:
            self.closed = True
            server = self.spawned
        if server is not None:
            server.close()


async def metrics_page(client: httpx.AsyncClient, target: Target) -> str:
    """The server's Prometheus page, or nothing when it has none or does not answer."""
    with contextlib.suppress(httpx.HTTPError):
        response = await client.get(f"{target.url}/metrics", headers=target.headers, timeout=10.0)
        if response.status_code == 200:
            return response.text
    return ""


async def server_version(url: str, headers: Mapping[str, str]) -> str | None:
    """The vLLM version a server reports at /version, or None when it does not say."""
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.get(f"{url}/version", headers=headers)
        return response.json().get("version") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def mismatch_message(url: str, model: str, served: list[str]) -> str:
    if not served:
        return f"{url} lists no model at /v1/models; point --server at a vLLM server of {model}"
    use = f"--model {served[0]}" if len(served) == 1 else f"--model with one of {served}"
    return (
        f"{url} serves {served}, not {model} (a server left over from another job?). Stop it, or point --server "
        f"at a server of {model}; to use what it serves anyway, pass {use}"
    )


def unapplied_flags(policy: ServerPolicy, served_len: object) -> list[str]:
    """Notes for the flags that only shape a server this run starts, when they were given for one it did not."""
    notes = []
    if served_len != policy.max_model_len:
        notes.append(
            f"--max-model-len {policy.max_model_len} does not apply to a server this run did not start; it serves "
            f"max_model_len {served_len or 'unknown'}"
        )
    notes += [f"{given} does not apply to a server this run did not start" for given in policy.spawn_only]
    return notes
