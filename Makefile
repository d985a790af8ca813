# Entry points a person (and CI) runs; each target states the one command behind it. The lines that take ARGS are
# not echoed (`@`): ARGS may hold an --api-key or a token, which make would print in clear.
.PHONY: run submit demo test test-pinned

# Runs any recipe from this clone, its header unedited, with the core's wheel built from src/ (the scripts' URLs and
# the wheel they pin are published only by a release): on your own GPU box, or against a server with ARGS="--server
# URL" (tools/run.sh). make run SCRIPT=lighton-ocr3-saturate.py INPUT=./scans OUTPUT=./scans-ocr [ARGS="..."]
run:
	@bash tools/run.sh "$(SCRIPT)" "$(INPUT)" "$(OUTPUT)" $(ARGS)

# Submits a recipe of this clone to HF Jobs before a release: JOBS jobs (default 1, each --shard I/JOBS), every one
# shipped the core's wheel built from src/, which its uv installs in place of the header's unpublished one (tools/run.sh
# adds --core-wheel). INPUT and OUTPUT are Hub datasets; HF_TOKEN or `hf auth login` gives the token; ARGS="--dry-run"
# prints the hf jobs uv run command of each job and sends nothing. make submit SCRIPT=... INPUT=you/scans OUTPUT=you/scans-ocr
submit:
	@bash tools/run.sh "$(SCRIPT)" "$(INPUT)" "$(OUTPUT)" --jobs $(or $(JOBS),1) $(ARGS)

# OCRs pages through a real vLLM engine on the CPU with the tiny model and prints the run's summary: by default the
# bundled sample pages with lighton-ocr3-saturate.py (which spawns `vllm serve` itself) into ./out/<script>-<input>.
# Your own pages and any recipe: make demo INPUT=./my-pages [OUTPUT=./my-pages-ocr] [SCRIPT=ovis-ocr2-server.py]
# [ARGS="--max-samples 5"]; the demo adds what the tiny model needs (tools/testbed/demo.sh).
demo:
	@DEMO_INPUT="$(INPUT)" DEMO_OUTPUT="$(OUTPUT)" DEMO_SCRIPT="$(SCRIPT)" bash tools/testbed/demo.sh $(ARGS)

# Builds the CPU vLLM test bed (uv in it runs the scripts) and the pinned tier's venvs with uv, or links the ones an
# earlier run on this machine left in its cache (seconds), then runs the whole test suite, the pinned tier included,
# on one worker per core (at most 4: each worker starts its own CPU engine) and lists the 25 slowest tests at the end.
test:
	bash tools/testbed/install.sh
	bash tools/testbed/install_pinned.sh
	.testbed/venv/bin/python -m pytest -q -n auto --maxprocesses 4 --maxschedchunk 1 --durations=25

# Only the pinned tier: every recipe on the vLLM its image pins (tests/pinned, marker `pinned`).
test-pinned:
	bash tools/testbed/install.sh
	bash tools/testbed/install_pinned.sh
	.testbed/venv/bin/python -m pytest -q -m pinned
