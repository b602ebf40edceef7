"""The bench's plain-Python chain agrees with the vectorized core (a second implementation)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "sizing.py"
_spec = importlib.util.spec_from_file_location("bench_sizing", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_scalar_reference_matches_vectorized_core():
    pts = bench.random_points(3000, seed=7)
    vec = bench.evaluate(pts)
    ref = bench.scalar_loop(pts, np.arange(3000))
    fits = np.array([r["fits"] for r in ref])
    assert fits.tolist() == vec["fits"].tolist()
    assert fits.sum() > 1000
    for key in ("tpot_s", "ttft_s", "output_tokens_per_s", "usd_per_mtok"):
        got = vec[key][fits]
        want = np.array([r[key] for r in ref if r["fits"]])
        assert got == pytest.approx(want, rel=1e-9), key


def test_bench_runs_and_reports(capsys):
    res = bench.main(["--points", "5000", "--loop-sample", "50", "--json"])
    assert res["points"] == 5000
    assert res["vectorized_points_per_s"] > 0
    assert '"points": 5000' in capsys.readouterr().out
