"""Shared core of the vLLM OCR recipes.

Every recipe script inlines a generated copy of these modules (tools/build_scripts.py), so a script runs alone
from its URL while the code lives, and is tested, once here.
"""
