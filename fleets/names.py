"""Canonical lookup keys for the GPU and model names users type (pure, no Django).

Matching is case-insensitive, with or without an org prefix ("meta-llama/") and an
"-Instruct"/"-chat"/"-hf"/"-it"/"-base" suffix; "Meta-Llama-3.1-70B" matches "Llama-3.1-70B".
"""

from __future__ import annotations

import re

NAME_SUFFIXES = ("-instruct", "-chat", "-hf", "-it", "-base")


def normalize_name(name: str) -> str:
    """Lowercase, drop the org prefix and chat suffixes, use '-' for separators."""
    key = str(name).strip().lower()
    key = key.rsplit("/", 1)[-1] if "/" in key and "(" not in key else key
    key = re.sub(r"[\s_]+", "-", key)
    key = re.sub(r"^meta-(?=llama)", "", key)
    changed = True
    while changed:
        changed = False
        for suffix in NAME_SUFFIXES:
            if key.endswith(suffix):
                key, changed = key[: -len(suffix)], True
    return key
