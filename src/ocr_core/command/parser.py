"""The command line every recipe shares: the uv-scripts contract plus the server and window controls.

Flags that exist in the collection's other scripts keep their names and defaults, so a job command written for one
recipe works for another.
"""

from __future__ import annotations

import argparse
import os

from ..facts import ModelFacts
from ..judging.breaker import MAX_ERROR_RATE
from ..judging.canary import CANARY_PAGES
from ..judging.poison import MAX_STRIKES
from ..planning.cache_volume import ENGINE_CACHE_FLAG, ENGINE_CACHE_MOUNT
from ..planning.defaults import (
    DEFAULT_SERVER,
    OFFLINE_BATCH,
    RETRY_BUDGET_S,
    SATURATE_MAX_INFLIGHT,
    SERVER_WINDOW,
    STALL_TIMEOUT_S,
)
from ..planning.job_commands import (
    job_command,
    script_url,
    wrapped_command,
)
from .argument_types import columns_argument, serve_args_checker, shard_argument
from .jobs_request import add_fanout_arguments
from .recipe_parser import RecipeHelp, RecipeParser


def usage(script: str, facts: ModelFacts, mode: str) -> str:
    if mode == "offline":
        where = "Run it on HF Jobs (the script runs the vLLM engine in-process, on the job's GPU):"
        alternative = "On your own GPU machine:\n  uv run {url} INPUT_DATASET OUTPUT_DATASET"
    else:
        where = "Run it on HF Jobs (the image brings vLLM; the script starts `vllm serve` itself when it needs one):"
        alternative = (
            "Against a server that is already running:\n  uv run {url} INPUT_DATASET OUTPUT_DATASET --server URL"
        )
    return f"""{script}: OCR a Hugging Face dataset of page images with {facts.model} on vLLM ({mode} mode).

{where}
{wrapped_command(job_command(script, facts, ["INPUT_DATASET", "OUTPUT_DATASET"]), "  ")}

{alternative.format(url=script_url(script))}

INPUT_DATASET is a folder of images, a local dataset folder, a Hub dataset id, a PDF file or a folder of PDFs
and images (one row per image and per PDF page);
OUTPUT_DATASET is a Hub dataset id or a local folder (starting with ., / or ~). Rerunning the same command
resumes. `--help` lists every option.
"""


def build_parser(script: str, facts: ModelFacts, mode: str) -> argparse.ArgumentParser:
    parser = RecipeParser(
        prog=script,
        description=f"OCR a dataset of page images with {facts.model} on vLLM ({mode} mode).",
        epilog=f"Job command:\n{wrapped_command(job_command(script, facts), '  ')}",
        formatter_class=RecipeHelp,
    )
    parser.add_argument(
        "input",
        help="a folder of images, a local dataset folder, a Hub dataset id, a PDF or a folder of PDFs (and images)",
    )
    parser.add_argument("output", help="output dataset: Hub id, or a local folder (starts with . / ~ or exists)")
    add_data_arguments(parser)
    add_output_arguments(parser)
    add_model_arguments(parser, facts, mode)
    if facts.add_arguments is not None:
        facts.add_arguments(parser)
    add_fanout_arguments(parser)
    return parser


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("input")
    group.add_argument(
        "--image-column",
        default="image",
        help="column holding the page images, or the PDFs (bytes or paths), one row per page (default: image)",
    )
    group.add_argument("--split", default="train", help="split to process (default: train)")
    group.add_argument("--input-config", help="config (subset) of the input dataset")
    group.add_argument(
        "--input-revision",
        help="commit of a Hub input to read (default: the one the job first ran on, else the newest)",
    )
    group.add_argument("--id-column", help="column with a unique row id (default: split and row index)")
    group.add_argument("--max-samples", type=int, help="process at most this many rows")
    group.add_argument("--shuffle", action="store_true", help="shuffle rows before --max-samples")
    group.add_argument("--seed", type=int, default=42, help="shuffle seed (default: 42)")
    group.add_argument(
        "--shard",
        type=shard_argument,
        help="process shard I of N (for example 0/4), the I-th of N contiguous ranges of the rows; each shard "
        "publishes its own rows as it finishes, so N jobs write one output",
    )
    group.add_argument(
        "--pdf-longest-edge",
        type=int,
        help="render PDF pages with this many pixels on their longer side, instead of the size the model's card "
        "asks for (within the model's image limits)",
    )


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument("--output-column", default="markdown", help="column for the text (default: markdown)")
    group.add_argument("--error-column", default="ocr_error", help="column for per-row errors (default: ocr_error)")
    group.add_argument(
        "--null-failed-text",
        action="store_true",
        help="leave the text of a failed row empty (null) instead of [OCR ERROR], the marker ocr-bench and the "
        "other OCR scripts recognise",
    )
    group.add_argument(
        "--columns",
        type=columns_argument,
        help="carry only these input columns (comma-separated, e.g. id) beside the results, for an input too large "
        "to copy; join back to the input by them (default: every input column)",
    )
    group.add_argument("--config", help="write the results as this config (subset) of the output dataset")
    group.add_argument("--create-pr", action="store_true", help="publish to the Hub as a pull request")
    group.add_argument("--private", action="store_true", help="create the output repo as private")
    group.add_argument(
        "--overwrite",
        action="store_true",
        help="replace existing output columns, results made with other settings (here and on the Hub), or a "
        "foreign dataset at OUTPUT",
    )
    group.add_argument(
        "--take-over",
        action="store_true",
        help="start although another run's lease on this output has not expired (after that run was killed)",
    )
    group.add_argument(
        "--take-over-job",
        metavar="JOB_ID",
        dest="take_over_jobs",
        action="append",
        default=[],
        help="start although the lease of this ended HF job has not expired, and no other (a --jobs launcher gives "
        "each relaunch the ids of its shard's ended jobs)",
    )
    group.add_argument("--retry-errors", action="store_true", help="on a rerun, retry rows that failed before")
    group.add_argument(
        "--max-error-rate",
        type=float,
        default=MAX_ERROR_RATE,
        help=f"stop the job when more than this share of the last 100 pages failed, or when the first 8 all failed "
        f"the same way (default: {MAX_ERROR_RATE}; 1.0 turns the check off)",
    )
    group.add_argument(
        "--canary-pages",
        type=int,
        default=CANARY_PAGES,
        help="stop the job when the first N answers are all degenerate: one character or token repeated ('!!!!'), "
        f"empty, loops or cut off at max_tokens, the sign of a wrong image tag (default: {CANARY_PAGES})",
    )
    group.add_argument(
        "--no-canary",
        action="store_true",
        help="turn the canary off (for inputs whose first pages really are blank or repetitive)",
    )
    group.add_argument("--finalize", action="store_true", help=argparse.SUPPRESS)
    group.add_argument("--hf-token", help="Hub token (default: the HF_TOKEN environment variable or your login)")
    group.add_argument(
        "--upload-every",
        type=float,
        default=300.0,
        help="seconds between progress uploads to the Hub (default: %(default).0f)",
    )


def add_model_arguments(parser: argparse.ArgumentParser, facts: ModelFacts, mode: str) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=facts.model, help=f"model id or folder (default: {facts.model})")
    group.add_argument(
        "--max-model-len", type=int, default=facts.max_model_len, help="context length to serve (prompt and output)"
    )
    group.add_argument(
        "--max-tokens", type=int, default=facts.sampling.get("max_tokens"), help="output tokens per page at most"
    )
    group.add_argument(
        "--temperature", type=float, default=facts.sampling.get("temperature", 0.0), help="sampling temperature"
    )
    group.add_argument(
        "--ignore-eos",
        action="store_true",
        help="benchmarks: write exactly --max-tokens per page, so pages cost the same",
    )
    group.add_argument(
        "--extra-serve-args",
        default="",
        type=serve_args_checker(facts.vllm_pin),
        help="more `vllm serve` / engine flags as one string; a flag given here replaces the recipe's own",
    )
    group.add_argument("--verbose", action="store_true", help="log package versions and each failed row as it happens")
    group.add_argument(
        "--plan",
        action="store_true",
        help="print what this run would start, as JSON (each engine's exact command and environment, the engine "
        "cache's key, the window, the input's pages, the projected time and cost), then exit: no model is loaded, "
        "OUTPUT is not touched and the Hub is not called",
    )
    group.add_argument(
        "--price-per-hour",
        type=float,
        help="dollars per hour of the machine, for the cost in the summary and the card (default: the HF Jobs "
        "price of the job's flavor)",
    )
    group.add_argument(
        ENGINE_CACHE_FLAG,
        metavar="LOCATION",
        help="keep vLLM's, torch's and Triton's compile caches here, keyed by vLLM, GPU, model and flags, so the next "
        "run loads what this one compiled instead of compiling again: a folder, or in HF Jobs a bucket, "
        f"hf://buckets/NAME/PATH, which the job command mounts at {ENGINE_CACHE_MOUNT} (see SERVING.md); a cache "
        "that cannot be used is a note, never a failure",
    )
    if mode == "offline":
        group.add_argument("--batch-size", type=int, default=OFFLINE_BATCH, help="pages per LLM.chat call")
    else:
        add_server_arguments(parser, mode)


def add_server_arguments(parser: argparse.ArgumentParser, mode: str) -> None:
    group = parser.add_argument_group("server")
    group.add_argument(
        "--server",
        default=DEFAULT_SERVER,
        help=f"vLLM server URL (default: {DEFAULT_SERVER}); several comma-separated URLs are your own servers of one "
        "model, fed as one fleet (each page to the least busy)",
    )
    group.add_argument(
        "--api-key",
        default=os.environ.get("VLLM_API_KEY"),
        help="bearer key sent only to --server (default: the VLLM_API_KEY environment variable); for a private "
        "Space, pass your HF token here, since the token itself only goes to huggingface.co and HF Jobs hosts",
    )
    window_help = (
        "pages in flight (default: the batch of each replica's engine, from its KV cache and max_num_seqs, "
        f"{SERVER_WINDOW} where the server does not say)"
        if mode == "server"
        else f"upper bound of the adaptive window (default: {SATURATE_MAX_INFLIGHT}, lowered to fit host memory)"
    )
    group.add_argument("--max-inflight", type=int, help=window_help)
    group.add_argument("--request-timeout", type=float, default=1800.0, help="seconds per request (default: 1800)")
    group.add_argument(
        "--retry-budget",
        type=float,
        default=RETRY_BUDGET_S,
        help=f"seconds one page may keep failing transiently (429, 5xx, timeouts) before the job stops, when nothing "
        f"else was answered meanwhile; else the page has a strike, and {MAX_STRIKES} over restarts and reruns make "
        f"it an error row that --retry-errors redoes (default: {RETRY_BUDGET_S:.0f})",
    )
    group.add_argument("--startup-timeout", type=float, default=1800.0, help="seconds to wait for the server")
    group.add_argument("--max-restarts", type=int, default=3, help="restarts of a spawned server that dies or hangs")
    group.add_argument(
        "--stall-timeout",
        type=float,
        default=STALL_TIMEOUT_S,
        help=(
            "seconds the engine may go without finishing a request or computing a token (prompt or output) while "
            "pages are in flight before it counts as hung: a spawned server is restarted, a reused one stops the "
            f"job (default: {STALL_TIMEOUT_S:.0f}; one page's prefill takes seconds even on an L4, the slowest GPU "
            "the recipes run on, and with many pages in flight tokens move every second; 0 turns the check off)"
        ),
    )
    group.add_argument(
        "--replicas",
        type=int,
        help="independent `vllm serve` replicas to spawn, spread evenly over the visible GPUs (default: what the "
        "machine plan picks from the model's size, the GPU and the CPU cores, e.g. 3 per H200 for a 0.8B model, 1 "
        "on an L4; the start-up log says why)",
    )
    group.add_argument(
        "--data-parallel-size",
        type=int,
        help="instead of replicas, one spawned server with this many data-parallel engines behind one endpoint",
    )
    group.add_argument(
        "--api-server-count",
        type=int,
        help="API servers of each spawned replica (default: on fast GPUs one per core the replicas leave, up to 4; "
        "else 1)",
    )
