# Entry points a person (and CI) runs; each target states the one command behind it.
.PHONY: demo test test-pinned

# OCRs the bundled sample pages with lighton-ocr3-saturate.py through a real vLLM engine on the CPU
# (the recipe spawns `vllm serve` itself) into ./out/demo, and prints the run's summary.
demo:
	bash tools/testbed/demo.sh

# Builds the CPU vLLM test bed and the pinned tier's venvs if needed (seconds when they are ready), then runs the
# whole test suite, the pinned tier included.
test:
	bash tools/testbed/install.sh
	bash tools/testbed/install_pinned.sh
	.testbed/venv/bin/python -m pytest -q

# Only the pinned tier: every recipe on the vLLM its image pins (tests/pinned, marker `pinned`).
test-pinned:
	bash tools/testbed/install.sh
	bash tools/testbed/install_pinned.sh
	.testbed/venv/bin/python -m pytest -q -m pinned
