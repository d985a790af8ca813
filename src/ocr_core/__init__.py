"""Shared core of the vLLM OCR recipes (distribution `ocr-vllm-core`): each shipped script pins one version of it,
states its model's facts (facts.py) and calls its shape's entry (recipes.py)."""
