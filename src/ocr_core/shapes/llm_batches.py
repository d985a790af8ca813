"""Batches through an in-process engine: the script owns a `vllm.LLM` and feeds it pages through `LLM.chat`.

The engine is built from the same serve_args as the server twin, parsed by vLLM's own argument parser, and pages
are prepared by the same code, so both twins send the model the same bytes and settings. Unlike the anchor
recipes, one bad page never fails its batch: images are decoded and checked before the batch, and a batch the
engine still rejects is split in halves down to the single page at fault.
"""

from __future__ import annotations

import builtins
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

from ..console import say
from ..errors import CommandError, JobFailed, internal_error
from ..facts import ModelFacts
from ..inputs.addresses import hub_unreachable
from ..inputs.images import BadImage, with_note
from ..inputs.pdf import PREP_THREADS, prepare_page
from ..inputs.source import RowInput
from ..judging.answers import judge
from ..judging.breaker import Breaker
from ..judging.canary import Canary
from ..planning.engine_plan import EngineRequest
from ..planning.page_rules import PageRules
from ..store.progress import ResultLog, RowResult
from .signals import StopSignals
from .tally import ProgressBar

SERVER_ONLY_FLAGS = {
    "--default-chat-template-kwargs": 1,
    "--served-model-name": 1,
    "--host": 1,
    "--port": 1,
    "--api-server-count": 1,
    "--trust-request-chat-template": 0,
}


@dataclass(frozen=True)
class OfflinePage:
    """A page ready for `LLM.chat`, and what its image preparation has to say about it."""

    messages: list[dict]
    note: str | None


class NoGpu(CommandError, RuntimeError):
    """The offline recipe cannot run here (the message says why); the command line adds where it can."""


def engine_flags(serve_args: Sequence[str]) -> list[str]:
    """serve_args without the flags that only the HTTP server understands."""
    kept: list[str] = []
    skip = 0
    for arg in serve_args:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in SERVER_ONLY_FLAGS:
            skip = 0 if "=" in arg else SERVER_ONLY_FLAGS[name]
            continue
        kept.append(arg)
    return kept


def engine_kwargs(serve_args: Sequence[str]) -> dict[str, Any]:
    """`LLM(...)` keyword arguments meaning exactly what the serve flags mean, via vLLM's own parser."""
    from vllm.engine.arg_utils import EngineArgs

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    defaults = vars(parser.parse_args([]))
    given = vars(parser.parse_args(engine_flags(serve_args)))
    return {key: value for key, value in given.items() if value != defaults.get(key)}


def check_gpu() -> None:
    """Offline recipes need vLLM and a GPU, except on vLLM's CPU build (which the tests use). The header installs
    vLLM on Linux only, the one platform it builds for, so elsewhere the recipe can still print its usage and launch
    `--jobs`, and a run stops here; the command line adds where it can run (command/advice.py)."""
    try:
        from vllm.platforms import current_platform
    except ModuleNotFoundError:
        installs = "the script's header installs it on Linux only"
        raise NoGpu(f"vLLM is not installed here ({sys.platform}; {installs})") from None
    if current_platform.is_cpu() or current_platform.is_cuda_alike():
        return
    raise NoGpu("no GPU found")


class OfflineRunner:
    """Feeds batches to the engine; whatever happens to a page becomes its row, watched by the canary and breaker."""

    def __init__(
        self,
        llm: Any,
        facts: ModelFacts,
        rules: PageRules,
        log: ResultLog,
        progress: ProgressBar,
        canary: Canary | None = None,
        stop: StopSignals | None = None,
    ) -> None:
        from vllm import SamplingParams

        self.llm = llm
        self.facts = facts
        self.rules = rules
        self.log = log
        self.progress = progress
        self.breaker = Breaker(rules.max_error_rate, image=facts.image)
        self.canary = canary
        self.stop = stop or StopSignals()
        self.sampling = offline_sampling(llm, rules)
        self.resampling = (
            SamplingParams(**{**self.sampling, "temperature": facts.retry_temperature})
            if facts.retry_temperature is not None
            else None
        )
        self.params = SamplingParams(**self.sampling)

    def run(self, rows: Iterator[RowInput], batch_size: int) -> None:
        """Prepares the next batch's pages in threads while the engine works on the current one."""
        try:
            with ThreadPoolExecutor(PREP_THREADS, thread_name_prefix="prep") as prep:
                upcoming = self.submit(rows, batch_size, prep)
                while upcoming:
                    current, upcoming = upcoming, self.submit(rows, batch_size, prep)
                    self.process([(row, future.result()) for row, future in current])
        finally:
            self.log.flush()

    def submit(self, rows: Iterator[RowInput], size: int, prep: ThreadPoolExecutor) -> list[tuple[RowInput, Future]]:
        return [(row, prep.submit(self.prepare, row)) for _, row in zip(range(size), rows)]

    def prepare(self, row: RowInput) -> OfflinePage | str:
        """The page's chat messages, or the reason it has none (its error column)."""
        try:
            image = prepare_page(row.cell, self.facts.max_side, self.facts.max_pixels, verify=True)
            content = self.facts.build_content(image.content_part())
            return OfflinePage([{"role": "user", "content": content}], image.note)
        except BadImage as exc:
            return f"{exc.kind}: {exc}"
        except Exception as exc:
            return internal_error("preparing the page", exc)

    def process(self, batch: list[tuple[RowInput, OfflinePage | str]]) -> None:
        good: list[tuple[RowInput, OfflinePage]] = []
        for row, page in batch:
            if isinstance(page, str):
                self.record(RowResult(row.index, row.row_id, error=page))
            else:
                good.append((row, page))
        if good:
            self.generate(good, self.params, resampled=False)

    def generate(
        self, items: list[tuple[RowInput, OfflinePage]], params: Any, resampled: bool, sent: float | None = None
    ) -> None:
        """One `LLM.chat` call; a failing batch is split in halves down to the page that fails alone. `sent`: when
        these pages first went to the engine (a split or a resample keeps it: the sustained rate counts from then);
        the engine is loaded before the first batch, so every batch is sent with the whole engine serving."""
        started = time.monotonic()
        if sent is None:
            sent = started
            self.progress.tally.mark_sent(sent, whole=True)
        try:
            outputs = self.llm.chat(
                [page.messages for _, page in items],
                params,
                use_tqdm=False,
                chat_template_kwargs=self.facts.request_extras.get("chat_template_kwargs"),
            )
        except Exception as exc:
            if "EngineDead" in type(exc).__name__:
                raise JobFailed(f"the vLLM engine died: {exc}") from exc
            if len(items) == 1:
                row = items[0][0]
                self.record(RowResult(row.index, row.row_id, error=f"engine rejected the page: {exc}"[:500]), sent)
                return
            middle = len(items) // 2
            self.generate(items[:middle], params, resampled, sent)
            self.generate(items[middle:], params, resampled, sent)
            return
        seconds = (time.monotonic() - started) / len(items)
        loops = []
        for (row, page), output in zip(items, outputs):
            result = RowResult(row.index, row.row_id, attempts=1 + resampled, seconds=seconds)
            try:
                if self.take_output(output, result, resampled):
                    loops.append((row, page))
                    continue
            except Exception as exc:
                result.error = internal_error("parsing the answer", exc)
            if result.text is not None:
                result.error = with_note(result.error, page.note)
            self.record(result, sent)
        if loops:
            self.generate(loops, self.resampling, resampled=True, sent=sent)

    def take_output(self, output: Any, result: RowResult, resampled: bool) -> bool:
        """Fills `result` from one `RequestOutput`; True asks for one resampled attempt of a repetition loop."""
        completion = output.outputs[0]
        result.finish_reason = completion.finish_reason
        result.prompt_tokens = len(output.prompt_token_ids or [])
        result.completion_tokens = len(completion.token_ids)
        verdict = judge(
            completion.text, completion.finish_reason, self.facts, self.rules.answers, resampled, result.attempts
        )
        result.text, result.extra, result.error = verdict.text, verdict.extra, verdict.error
        return verdict.resample

    def record(self, result: RowResult, sent: float | None = None) -> None:
        """Logs and counts the row as one step (a stop signal waits for both), then lets the watches judge it."""
        with self.stop.whole():
            self.log.add(result)
            self.progress.record(result.error, result.completion_tokens, sent)
        if result.error is not None and self.rules.verbose:
            say(f"{result.row_id}: {result.error}")
        if self.canary is not None:
            self.canary.record(result)
        self.breaker.record(result.error)


def offline_sampling(llm: Any, rules: PageRules) -> dict[str, Any]:
    """The server's sampling rule: the model's generation_config defaults, then the recipe's, then the CLI's."""
    return {**llm.llm_engine.model_config.get_diff_sampling_param(), **rules.sampling}


def stdout_to_stderr() -> TextIO:
    """Points file descriptor 1 at stderr for the rest of the process and returns a stream on the real stdout.

    vLLM's engine processes inherit fd 1 and log to it until (and while) they shut down at exit; stdout must carry
    only the final summary line, which goes through the returned stream.
    """
    sys.stdout.flush()
    summary = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return summary


def open_llm(engine: EngineRequest, verbose: bool) -> Any:
    """Builds the engine from the request's flags; the FlashInfer sampler needs nvcc, which the vLLM images lack.
    vLLM's own INFO and WARNING lines (about 60 of them while the engine starts), and torch's and Python's warnings
    about vLLM's own code, stay off the terminal unless --verbose, as a server recipe keeps them in its server log
    (quiet_engine_notices); the variables are read when vLLM is first imported, here, and its engine processes
    inherit them."""
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    if not verbose:
        quiet_engine_notices()
    check_gpu()
    from vllm import LLM

    kwargs = engine_kwargs(engine.offline_flags())
    say(f"building the engine: LLM(model={engine.model!r}, {', '.join(f'{k}={v!r}' for k, v in kwargs.items())})")
    try:
        with building_notes():
            return LLM(model=engine.model, **kwargs)
    except Exception as exc:
        raise JobFailed(
            f"the vLLM engine could not be built: {type(exc).__name__}: {exc}{build_failure_hint(exc, engine)}"
        ) from exc


BUILDING_NOTE_EVERY_S = 20.0


@contextmanager
def building_notes() -> Iterator[None]:
    """Says every BUILDING_NOTE_EVERY_S how long the engine has been building: loading the model, measuring memory
    and warming up take minutes, vLLM's own log is kept quiet meanwhile, and a run that says nothing looks hung (a
    server recipe says the same of its server's start)."""
    started = time.monotonic()
    built = threading.Event()

    def note() -> None:
        while not built.wait(BUILDING_NOTE_EVERY_S):
            say(
                f"engine still building after {time.monotonic() - started:.0f} s (loading the model, then measuring "
                "memory and warming up; a first start takes minutes)"
            )

    notes = threading.Thread(target=note, name="building-notes", daemon=True)
    notes.start()
    try:
        yield
    finally:
        built.set()
        notes.join()


ENGINE_WARNINGS = ("ignore:`torch.distributed.reduce_op` is deprecated:FutureWarning",)
"""Python warnings vLLM's import raises in every engine process, about its own code (`-W` options)."""


def quiet_engine_notices() -> None:
    """Keeps the engine's notices off the terminal, in this process and the engine processes it starts: vLLM's log
    below ERROR (VLLM_LOGGING_LEVEL), torch's C++ warnings (TORCH_CPP_LOG_LEVEL: the CPU build's NUMA binding
    notice) and ENGINE_WARNINGS, passed to the spawned engine processes through sys.warnoptions as their -W."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    for option in ENGINE_WARNINGS:
        if option not in sys.warnoptions:
            sys.warnoptions.append(option)
        action, message, category = option.split(":")
        warnings.filterwarnings(action, message=re.escape(message), category=getattr(builtins, category))


def build_failure_hint(exc: BaseException, engine: EngineRequest) -> str:
    """What to check, for the failure it was: the network when the model's files could not be fetched, the flags
    given with --extra-serve-args when there are some; nothing else is known to help. A single hint about those
    flags followed every failure, a model download that could not connect included, under a flag's wrong name."""
    unreachable = hub_unreachable(exc)
    if unreachable is not None:
        return (
            f". The model's files are fetched from the Hub, but {unreachable}, or pass --model a local folder that "
            "holds the model"
        )
    if engine.user_flags:
        return ". Flags passed with --extra-serve-args replace the recipe's flags of the same name: check them"
    return ""


def close_llm(llm: Any) -> None:
    """Stops the engine's processes while the run still speaks: left to the interpreter's exit, their shutdown log
    came after the closing sentence and the summary line and buried them."""
    engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    shutdown = getattr(engine_core, "shutdown", None)
    if shutdown is not None:
        shutdown()
