"""Names the dead-code check (tests/test_dead_code.py) must not report, each with why nothing in src/ or tools/
reads it by name. Vulture reads this file as code that uses them; nothing imports it.
"""
# ruff: noqa

# Model facts: the modules in src/ocr_models define them, and ModelFacts.from_namespace and tools/build_scripts.py
# read them by string key (ns["MODEL"], ns.get("SERVE_ENV"), facts["VLLM_PIN"]).
MODEL
IMAGE
FLAVOR
JOB_COMMAND
VLLM_PIN
MAX_MODEL_LEN
SERVE_ARGS
SERVE_ENV
SAMPLING
REQUEST_EXTRAS
RETRY_TEMPERATURE
EXTRA_COLUMNS
PDF_RENDER
PARAMS_B

# The source of the HF Jobs price table; tests/test_cost.py keeps models.json's "_prices.source" equal to it.
JOB_PRICES_SOURCE

# A column of the progress parts: RowResult is written through dataclasses.asdict (ResultLog.flush).
_.row_index

# The second argument of a signal handler (signal.signal calls it with the frame).
frame

# Fields of the summary line: Summary.line writes RunFacts through vars(), and users and benchmarks read the JSON.
_.done_this_run
_.resumed
_.errors_this_run
_.loops_this_run
_.truncated_this_run
_.output_tokens_per_s
_.peak_window
_.interrupted
