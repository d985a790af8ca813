"""The server one run talks to: found or spawned at the start, restarted when it dies, stopped at the end.

Recovery is single-flight: when many pages in flight fail together because the engine died, one of them restarts
it and the others see the new generation number and simply retry.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from .chat import JobFailed, Retryable
from .cli import job_command, script_url
from .facts import ModelFacts
from .pump import Target
from .redact import redact
from .report import say
from .scale import ScalePlan
from .server import (
    ServerError,
    SpawnedServer,
    healthy,
    is_local,
    log_tail,
    serve_command,
    served_model,
    url_port,
)

HEALTH_CHECKS = 3
HF_TOKEN_HOSTS = ("huggingface.co", "hf.co")
HF_TOKEN_DOMAINS = (".huggingface.co", ".hf.co", ".hf.jobs")
HEALTH_CHECK_GAP_S = 2.0


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


def missing_vllm_message(url: str, script: str, facts: ModelFacts, argv: list[str]) -> str:
    return redact(
        f"No vLLM server answers at {url}, and the `vllm` command is not on PATH to start one.\n"
        f"Run this script on the vLLM image, which brings `vllm` (the script then starts the server itself):\n"
        f"  {job_command(script, facts, argv)}\n"
        f"or point it at a server that is already running:\n"
        f"  uv run {script_url(script)} {' '.join(shlex.quote(a) for a in argv[:2])} --server http://HOST:8000"
    )


class Engine:
    def __init__(
        self, args: argparse.Namespace, facts: ModelFacts, script: str, argv: list[str], scale: ScalePlan
    ) -> None:
        self.args = args
        self.scale = scale
        self.facts = facts
        self.script = script
        self.argv = argv
        self.url = args.server.rstrip("/")
        self.headers = api_headers(self.url, args.hf_token, args.api_key)
        self.spawned: SpawnedServer | None = None
        self.restarts = 0
        self.generation = 0
        self.lock = asyncio.Lock()

    async def open(self) -> Target:
        """Reuses a server that answers; spawns one for a local address; waits for a remote one."""
        if not healthy(self.url, self.headers):
            if is_local(self.url):
                await asyncio.to_thread(self.spawn)
            else:
                say(f"waiting up to {self.args.startup_timeout:.0f} s for {self.url} to answer /health")
                if not await self.poll_health(self.args.startup_timeout):
                    raise ServerError(f"{self.url} did not answer /health within {self.args.startup_timeout:.0f} s")
        return Target(self.url, served_model(self.url, self.args.model, self.headers), self.headers)

    def spawn(self) -> None:
        if shutil.which("vllm") is None:
            raise ServerError(missing_vllm_message(self.url, self.script, self.facts, self.argv))
        serve_args = list(self.facts.serve_args)
        if self.facts.prepare_serve is not None:
            serve_args = self.facts.prepare_serve(serve_args, self.args)
        extra = [
            "--max-model-len",
            str(self.args.max_model_len),
            *self.scale.serve_args(),
            *shlex.split(self.args.extra_serve_args),
        ]
        port = url_port(self.url)
        self.spawned = SpawnedServer(
            serve_command(self.args.model, serve_args, port, extra),
            self.url,
            env=dict(self.facts.serve_env),
            log_path=Path(tempfile.gettempdir()) / f"vllm-serve-{port}.log",
        )
        say(f"machine: {self.scale.describe()}")
        say(f"starting: {shlex.join(self.spawned.argv)}")
        say(f"server log: {self.spawned.log_path}")
        self.spawned.start()
        self.spawned.wait_ready(self.args.startup_timeout)
        say("server is ready")

    async def poll_health(self, seconds: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        async with httpx.AsyncClient(timeout=5.0) as client:
            while loop.time() < deadline:
                try:
                    if (await client.get(f"{self.url}/health", headers=self.headers)).status_code == 200:
                        return True
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(HEALTH_CHECK_GAP_S)
        return False

    async def still_healthy(self) -> bool:
        """A few looks at /health, so one slow answer under load does not trigger a restart."""
        if self.spawned is not None and not self.spawned.alive():
            return False
        for _ in range(HEALTH_CHECKS):
            if await self.poll_health(HEALTH_CHECK_GAP_S * 2):
                return True
        return False

    async def recover(self, error: Retryable, generation: int) -> int:
        """Restarts a dead spawned server (bounded); returns the generation the caller should retry under."""
        async with self.lock:
            if generation != self.generation or not error.engine_dead or await self.still_healthy():
                return self.generation
            if self.spawned is None:
                if await self.poll_health(self.args.startup_timeout):
                    return self.generation
                raise JobFailed(f"{self.url} stopped answering ({error}) and did not come back")
            if self.restarts >= self.args.max_restarts:
                raise JobFailed(
                    f"the vLLM engine died {self.restarts + 1} times ({error}); last lines of "
                    f"{self.spawned.log_path}:\n{log_tail(self.spawned.log_path)}"
                )
            self.restarts += 1
            say(f"the vLLM server is down ({error}); restarting it ({self.restarts}/{self.args.max_restarts})")
            await asyncio.to_thread(self.restart)
            self.generation += 1
            return self.generation

    def restart(self) -> None:
        assert self.spawned is not None
        self.spawned.stop()
        self.spawned.start()
        self.spawned.wait_ready(self.args.startup_timeout)
        say("server is ready again")

    def close(self) -> None:
        if self.spawned is not None:
            self.spawned.stop()
