"""Sizing-core tests run without Django: make the repo root and this folder importable."""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for path in (_HERE.parents[1], _HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
