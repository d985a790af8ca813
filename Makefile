# Entry points a person (and CI) runs; each target states the one command behind it.
.PHONY: demo test

# OCRs the bundled sample pages with lighton-ocr3-saturate.py through a real vLLM engine on the CPU
# (the recipe spawns `vllm serve` itself) into ./out/demo, and prints the run's summary.
demo:
	bash tools/testbed/demo.sh

# Builds the CPU vLLM test bed if needed (seconds when it is ready), then runs the whole test suite.
test:
	bash tools/testbed/install.sh
	.testbed/venv/bin/python -m pytest -q
