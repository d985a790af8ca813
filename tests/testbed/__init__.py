"""Test bed helpers: the CPU vLLM venv's environment and a tiny random vision-language model."""
