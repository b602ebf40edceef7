"""Public entry points: predict_rows and plan, and the derivation they carry."""

import math
import time

import numpy as np
import pytest
from specs_catalog import B200, DEEPSEEK_V3, GPT_OSS_120B, H100, H200, L40S, LLAMA_8B, LLAMA_70B

from sizing.chain import Candidate, Predictions, plan, predict_rows
from sizing.derivation import evaluate
from sizing.specs import ApiPrice, Parallelism, Policy, Slo, Traffic


def _rows():
    return predict_rows(
        [LLAMA_70B, LLAMA_70B, LLAMA_70B, DEEPSEEK_V3, DEEPSEEK_V3, LLAMA_70B],
        [H100, H100, H100, H200, H200, H100],
        num_gpus=[1, 8, 8, 8, 8, 6],
        tp=[1, 8, 8, 8, 1, 4],
        pp=1,
        ep=[1, 1, 1, 8, 8, 1],
        weight_precision=["bf16", "bf16", "fp8", "fp8", "fp8", "fp8"],
        kv_precision=None,
        isl=1024,
        osl=1024,
        concurrency=[np.nan, 64, np.nan, 64, 256, 8],
    )


def test_predict_rows_columns_and_misfits():
    r = _rows()
    assert isinstance(r, Predictions)
    assert len(r) == 6
    assert r.fits.tolist() == [False, True, True, True, True, False]
    assert r.reason[0] == "weights 141.1 GB > 72.0 GB usable on one H100 SXM"
    assert r.reason[5] == "GPU count is not a multiple of TP4 x PP1"
    assert math.isnan(r.ttft_ms[0]) and r.total_output_tok_s[0] == 0
    assert r.weights_gb_per_gpu[1] == pytest.approx(17.6375)
    assert r.kv_bytes_per_token[1] == 327_680
    # default KV precision: fp8 for fp8 weights -> 163,840
    assert r.kv_bytes_per_token[2] == 163_840
    assert r.batch[1] == 64
    assert r.output_tok_s_per_gpu[1] == pytest.approx(r.total_output_tok_s[1] / 8)
    rec = r.records()[1]
    assert set(rec) == set(Predictions.COLUMNS)
    assert rec["fits"] is True


def test_data_parallel_splits_concurrency_and_multiplies_throughput():
    # DeepSeek DP8 x EP8 (tp 1): 256 clients -> 32 per rank; KV capacity summed over 8 ranks
    r = _rows()
    c = r.candidates
    assert c.dp[4] == 8 and c.dp[3] == 1
    assert r.operating.batch_per_rank[4] == 32
    assert r.kv_capacity_tokens[4] % 8 == 0
    assert r.total_output_tok_s[4] == pytest.approx(
        8 * 32 / r.operating.residence_s[4] * 1024, rel=1e-9
    )


def test_derivation_numbers_are_the_outputs():
    r = _rows()
    i = 1
    d = {s.name: s for s in r.derivation(i)}
    assert d["weights_gb_per_gpu"].value == r.weights_gb_per_gpu[i]
    assert d["kv_bytes_per_token"].value == r.kv_bytes_per_token[i]
    assert d["kv_capacity_tokens"].value == r.kv_capacity_tokens[i]
    assert d["max_concurrency"].value == r.max_concurrency[i]
    assert d["mean_tpot_ms"].value == pytest.approx(r.tpot_ms[i])
    assert d["mean_ttft_ms"].value == pytest.approx(r.ttft_ms[i])
    assert d["mean_value_output_tok_s_per_replica"].value == pytest.approx(r.total_output_tok_s[i])
    # and each formula step's result follows from its own inputs
    for s in d.values():
        if s.kind == "formula":
            assert evaluate(s.formula, s.inputs) == pytest.approx(s.value), s.name
    b = {x.name: x.value for x in d["kv_budget_gb_per_gpu"].inputs}
    assert d["kv_budget_gb_per_gpu"].value == pytest.approx(
        (b["usable"] - b["weights"] - b["workspace"] - b["runtime_overhead"]) / 1e9
    )
    # a misfit's derivation ends with its reason
    last = r.derivation(0)[-1]
    assert last.name == "fits" and last.note == r.reason[0]
    assert all(s.as_dict()["unit"] is not None for s in r.derivation(1))


def test_predict_rows_handles_100k_rows_fast():
    n = 100_000
    rng = np.random.default_rng(1)
    models = [LLAMA_8B, LLAMA_70B, DEEPSEEK_V3, GPT_OSS_120B]
    gpus = [H100, H200, B200, L40S]
    mi, gi = rng.integers(0, 4, n), rng.integers(0, 4, n)
    tp = rng.choice([1, 2, 4, 8], n)
    t0 = time.perf_counter()
    r = predict_rows(
        [models[i] for i in mi],
        [gpus[i] for i in gi],
        tp,
        tp,
        1,
        1,
        rng.choice(["bf16", "fp8", "fp4", "int4"], n).tolist(),
        None,
        rng.choice([128, 1024, 8192], n),
        rng.choice([128, 1024], n),
        np.where(rng.random(n) < 0.3, np.nan, rng.choice([1, 8, 64, 256], n)),
    )
    elapsed = time.perf_counter() - t0
    assert len(r) == n
    # a guard against a per-row Python loop (~40x slower), not a benchmark: the figure is
    # bench/sizing.py's (README); on a loaded shared machine this took 5.2 s once
    assert elapsed < 30.0
    assert np.all(np.isfinite(r.tpot_ms[r.fits]))
    assert np.all(r.tpot_ms[r.fits] > 0)
    assert np.all(r.reason[~r.fits] != "")


TRAFFIC = Traffic(
    peak_rps=20,
    mean_rps=8,
    prompt_tokens_mean=2000,
    output_tokens_mean=300,
    prompt_tokens_p95=6000,
    output_tokens_p95=800,
)
SLO = Slo(ttft_ms=2000, tpot_ms=50)
CANDS = [
    Candidate(LLAMA_70B, H100, "bf16", Parallelism(tp=8)),
    Candidate(LLAMA_70B, H100, "fp8", Parallelism(tp=4)),
    Candidate(LLAMA_70B, H200, "fp8", Parallelism(tp=2)),
    Candidate(LLAMA_70B, L40S, "fp8", Parallelism(tp=8)),
    Candidate(LLAMA_70B, H100, "bf16"),
    Candidate(LLAMA_70B, H100, "fp8", Parallelism(tp=3)),
]


def test_plan_ranks_and_explains():
    p = plan(
        TRAFFIC,
        SLO,
        Policy(target_utilization=0.7, spare_replicas=1),
        CANDS,
        ApiPrice(0.6, 0.8, label="hosted 70B"),
    )
    assert [r.rank for r in p.rows] == list(range(1, 7))
    ok = [r for r in p.rows if r.meets_slo]
    assert ok and p.best is ok[0]
    # ranked by monthly cost among SLO-meeting rows; misfits last
    assert [r.usd_per_month for r in ok] == sorted(r.usd_per_month for r in ok)
    assert not p.rows[-1].fits and not p.rows[-2].fits
    reasons = {r.reason for r in p.rows if not r.fits}
    assert "weights 141.1 GB > 72.0 GB usable on one H100 SXM" in reasons
    assert any("TP 3 does not divide" in x for x in reasons)
    for r in ok:
        assert r.tpot_ms <= SLO.tpot_ms and r.ttft_ms <= SLO.ttft_ms
        assert r.binding in ("memory", "throughput", "tpot", "ttft")
        # replicas = ceil(peak / (X * 0.7)) + 1 spare
        assert r.serving_replicas == math.ceil(20 / (r.requests_per_s_per_replica * 0.7) - 1e-9)
        assert r.replicas == r.serving_replicas + 1
        assert r.gpus == r.replicas * r.gpus_per_replica
        assert r.usd_per_hour == pytest.approx(
            r.gpus * {"H100 SXM": 2.5, "H200 SXM": 3.5, "L40S": 1.0}[r.gpu]
        )
        assert r.usd_per_month == pytest.approx(r.usd_per_hour * 730)
        # $/M output tokens at the mean load: $/h / (8 req/s * 300 tok * 3600) * 1e6
        assert r.usd_per_mtok == pytest.approx(r.usd_per_hour / (8 * 300 * 3600) * 1e6)
        assert r.tokens_per_usd == pytest.approx(1e6 / r.usd_per_mtok)
        assert r.utilization == pytest.approx(8 / (r.replicas * r.requests_per_s_per_replica))
        assert r.breakeven is not None
        assert r.breakeven.api_usd_per_mtok == pytest.approx((2000 * 0.6 + 300 * 0.8) / 2300)
        d = {s.name: s.value for s in r.derivation}
        assert d["replicas"] == r.replicas
        assert d["usd_per_mtok"] == pytest.approx(r.usd_per_mtok)
        assert d["mean_tpot_ms"] == pytest.approx(r.mean_value_tpot_ms)
        assert d[f"tpot_ms_{r.latency_statistic}"] == pytest.approx(r.tpot_ms)
    assert set(p.cheapest_per_gpu) <= {"H100 SXM", "H200 SXM", "L40S"}
    for gpu, row in p.cheapest_per_gpu.items():
        assert row.usd_per_month == min(r.usd_per_month for r in ok if r.gpu == gpu)


def test_each_model_priced_against_its_own_api_in_one_call_gives_each_row_its_own_numbers():
    # given two models with their own API prices, and an API for one model only
    import dataclasses

    cands = [CANDS[1], CANDS[2], Candidate(LLAMA_8B, H100, "fp8"), Candidate(LLAMA_8B, L40S, "fp8")]
    cands = [dataclasses.replace(c, label=f"c{i}") for i, c in enumerate(cands)]
    api_70b, api_8b = ApiPrice(0.6, 0.8, label="hosted 70B"), ApiPrice(0.1, 0.2, label="8B")
    policy = Policy(target_utilization=0.7, spare_replicas=1)
    # when sized in one call with a price per candidate, and per model in calls of their own
    together = plan(TRAFFIC, SLO, policy, cands, [api_70b, api_70b, api_8b, None]).rows
    alone = [*plan(TRAFFIC, SLO, policy, cands[:2], api_70b).rows,
             *plan(TRAFFIC, SLO, policy, cands[2:3], api_8b).rows,
             *plan(TRAFFIC, SLO, policy, cands[3:]).rows]  # fmt: skip
    # then every row is the same but for its rank, break-even against its own model's API
    by_label = {r.label: r for r in alone}
    for row in together:
        other = by_label[row.label]
        assert {**row.__dict__, "rank": 0} == {**other.__dict__, "rank": 0}, row.label
    bev = {r.label: r.breakeven for r in together}
    assert bev[cands[0].label].api_usd_per_mtok == pytest.approx((2000 * 0.6 + 300 * 0.8) / 2300)
    assert bev[cands[2].label].api_usd_per_mtok == pytest.approx((2000 * 0.1 + 300 * 0.2) / 2300)
    assert bev[cands[3].label] is None
    with pytest.raises(ValueError, match="api_price: 1 prices for 4 candidates"):
        plan(TRAFFIC, SLO, policy, cands, [api_70b])


def test_plan_p95_context_must_fit():
    # 70B fp8 on 2 L40S fits at the mean, but a 60k-token p95 prompt exceeds its KV budget
    # (~39,700 tokens per sequence; a lognormal p95 is at most 3.87x its mean)
    t = Traffic(
        peak_rps=1,
        mean_rps=1,
        prompt_tokens_mean=20_000,
        output_tokens_mean=100,
        prompt_tokens_p95=60_000,
    )
    row = plan(t, SLO, Policy(), [Candidate(LLAMA_70B, L40S, "fp8", Parallelism(tp=2))]).rows[0]
    assert not row.fits
    assert row.reason.startswith("one 60,100-token sequence needs"), row.reason


def test_plan_without_candidates_or_api():
    assert plan(TRAFFIC, SLO, Policy(), []).rows == ()
    p = plan(TRAFFIC, SLO, Policy(), CANDS[:2])
    assert all(r.breakeven is None for r in p.rows)
