"""Names the dead-code check (tests/test_dead_code.py) must not report, each with why nothing in src/ or tools/
(or the shipped scripts at the top level) reads it by name. Vulture reads this file as code that uses them; nothing imports it.
"""
# ruff: noqa

# The header pins tools/release.py compares: read and compared field by field (Pins.__dataclass_fields__).
_.core
_.wheel_url
_.vllm

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
_.sustained_s
_.sustained_pages
_.sustained_unix
_.billed_s

# The zip entry that tools/release.py adds to the release wheel: zipfile reads these when it writes the entry.
_.compress_type
_.external_attr

# Fields of the summary line: Summary.line writes ScriptCopy through vars().
_.script_release
_.script_sha256
_.prompt_sha256

# The settings alone, without a launcher's request: what bench/shard_publish.py and the tests build settings with.
parse_arguments

# A field of a fan-out's summary line: FanoutSummary.line writes each ShardOutcome through asdict().
_.duration_s

# The shape fields of a registry Model (src/ocr_models/__init__.py): Model.scripts reads them by shape name (SHAPES).
_.offline
_.server
_.saturate

# Parts of the engine cache's key (serving/cache_key.py): hashed and stored through dataclasses.asdict.
_.torch
_.triton

# A tar member's time (tarfile writes TarInfo.mtime into each header it adds).
_.mtime

# The tokenizers library reads the parts of the tiny LLaVA's BPE tokenizer that tools/dummy_models/llava.py sets.
_.pre_tokenizer
_.decoder

# The test bed's model caches call it (tests/testbed/tiny_model.py, pinned_model.py).
cached_model

# tools/vllm_flags.py's stub importer: Python's import system calls the finder and loader methods by name, and reads
# a stubbed module's __path__ (a package, so its submodules import) and __getattr__ (each name a stand-in class).
_.find_spec
_.create_module
_.__path__
_.__getattr__
