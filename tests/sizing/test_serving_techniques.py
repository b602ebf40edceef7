"""Speculative decoding, prefix caching and routing: formulas, published figures, both paths."""

from dataclasses import replace

import numpy as np
import pytest
from specs_catalog import DEEPSEEK_V3, H100, H200, LLAMA_8B, LLAMA_70B

from sizing import routing
from sizing.candidates import CandidateArrays
from sizing.chain import Candidate, plan, predict_rows
from sizing.memory import fit_memory, pinned_prefix_bytes_per_gpu
from sizing.operating import closed_loop
from sizing.serving import serving_overrides
from sizing.simulate import LengthDist, Workload, simulate
from sizing.specs import EngineSettings, Parallelism, Policy, Slo, Traffic, tokens_per_verify_step
from sizing.speculative import break_even_batch, default_head_params, speed_up

#: Llama 3.2 1B (config.json of meta-llama/Llama-3.2-1B: 16 layers, hidden 2048, 32 heads,
#: 8 KV heads of 64, tied 128,256 x 2,048 embedding, 1.24e9 params)
LLAMA_1B = replace(LLAMA_8B, name="Llama 3.2 1B", num_layers=16, hidden_size=2048,
                   num_attention_heads=32, num_kv_heads=8, head_dim=64, total_params=1.24e9,
                   active_params=1.24e9, embedding_params=128256 * 2048,
                   tie_word_embeddings=True)  # fmt: skip


def spec_engine(target, method="draft", tokens=4, acceptance=0.7, draft=LLAMA_8B, **kw):
    block = {"method": method, "tokens": tokens, "acceptance": acceptance, **kw}
    if method != "draft":
        block.setdefault("head_params", default_head_params(target))
    values = serving_overrides({"speculative": block}, draft if method == "draft" else None,
                               (target,))  # fmt: skip
    return EngineSettings(**(vars(EngineSettings()) | values))


# ---------------------------------------------------------------------------- speculative
def test_tokens_per_verify_step():
    assert tokens_per_verify_step(0.7, 4) == pytest.approx(2.7731)  # 1 + .7 + .49 + .343 + .2401
    assert tokens_per_verify_step(0.0, 4) == 1.0
    assert tokens_per_verify_step(0.9, 0) == 1.0
    # per position: 1 + 0.8 + 0.8 * 0.5
    assert tokens_per_verify_step(0.0, 2, (0.8, 0.5)) == pytest.approx(2.2)


def test_deepseek_v3_mtp_matches_the_published_speed_up():
    # DeepSeek-V3 technical report (arXiv 2412.19437, section 5.4.3): one MTP token, its
    # acceptance "between 85% and 90%", "1.8 times TPS". Model: H200 fp8 TP8 EP8, batch 1.
    e = spec_engine(DEEPSEEK_V3, method="mtp", tokens=1, acceptance=0.875)
    args = (DEEPSEEK_V3, H200, 8, 8, 1, 8, "fp8", None, 1000, 1000, 1)
    plain, spec = predict_rows(*args), predict_rows(*args, engine=e)
    ratio = spec.total_output_tok_s[0] / plain.total_output_tok_s[0]
    assert ratio == pytest.approx(1.8, rel=0.10)  # 1.70: -5.6 %


def test_llama_70b_draft_decoding_against_nvidia_h200_figures():
    # NVIDIA TensorRT-LLM blog (reference measured-notes section 7): Llama 3.3 70B FP8 on one
    # H200 at batch 1: 51.14 tok/s plain, 181.74 tok/s with a draft model (3.55x); the
    # acceptance is not published. Plain decode is within 15 % (44.1: -14 %)...
    args = (LLAMA_70B, H200, 1, 1, 1, 1, "fp8", None, 1000, 1000, 1)
    plain = predict_rows(*args).total_output_tok_s[0]
    assert plain == pytest.approx(51.14, rel=0.15)
    # ...and the 3.55x needs a per-position acceptance of about 0.9 at k = 4 with a 1B draft
    ratios = {a: predict_rows(*args, engine=spec_engine(LLAMA_70B, acceptance=a, draft=LLAMA_1B))
              .total_output_tok_s[0] / plain for a in (0.8, 0.9)}  # fmt: skip
    assert ratios[0.8] < 3.55 < ratios[0.9] * 1.01


def test_speed_up_falls_below_one_past_the_break_even_batch():
    # 70B fp8 TP4 on H100 with an 8B draft, k = 4, a = 0.7
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4, engine=spec_engine(LLAMA_70B))
    ctx = np.array([1100.0])
    b_star = break_even_batch(c, ctx)[0]
    assert 50 < b_star < 500  # 138
    assert speed_up(c, np.array([1.0]), ctx)[0] > 1.5
    assert speed_up(c, np.array([b_star - 1]), ctx)[0] > 1.0
    assert speed_up(c, np.array([b_star + 1]), ctx)[0] <= 1.0


def test_draft_weights_and_cache_join_the_memory_fit():
    plain = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4)
    spec = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4, engine=spec_engine(LLAMA_70B))
    f0, f1 = fit_memory(plain, 2000), fit_memory(spec, 2000)
    # 8.03e9 params x 2 B / TP4 = 4.015 GB less KV budget per GPU
    assert f0.kv_budget_bytes_per_gpu[0] - f1.kv_budget_bytes_per_gpu[0] == pytest.approx(4.015e9)
    # the 8B draft's cache: 32 layers x 2 x 8 x 128 x 1 B (fp8 KV) / TP4 = 16,384 B/token more
    extra = f1.kv_bytes_per_token_per_gpu[0] - f0.kv_bytes_per_token_per_gpu[0]
    assert extra == pytest.approx(16384)


def test_mean_value_and_simulator_agree_with_speculative_decoding():
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4, engine=spec_engine(LLAMA_70B))
    op = closed_loop(c, fit_memory(c, 1200), 1000, 200, 16)
    sim = simulate(c, Workload(LengthDist(1000), LengthDist(200), requests=160, concurrency=16,
                               warmup_requests=32))  # fmt: skip
    # 1,320 vs 1,461 tok/s (-10 %; the plain row is -5 %)
    assert op.output_tokens_per_s[0] == pytest.approx(sim.output_tokens_per_s, rel=0.15)


def test_plan_keeps_the_cheaper_of_with_and_without():
    cand = Candidate(LLAMA_70B, H100, "fp8", Parallelism(tp=4), engine=spec_engine(LLAMA_70B))
    # a tight TPOT at modest load: speculative decoding pays
    tight = plan(Traffic(2, 2, 1000, 300), Slo(3000, 9), Policy(), [cand], tails=None).rows[0]
    assert tight.speculative == "on" and tight.meets_slo
    names = {s.name for s in tight.derivation}
    assert {"spec_speed_up", "spec_break_even_batch", "speculative_decoding"} <= names
    # a loose TPOT at high load: big batches past B*, plain decoding is cheaper
    loose = plan(Traffic(200, 200, 1000, 300), Slo(20000, 200), Policy(), [cand], tails=None)
    assert loose.rows[0].speculative == "off"


def test_bad_speculative_input_is_refused():
    from sizing.engine_settings import SettingError

    for block, field in (
        ({"method": "draft", "tokens": 0, "acceptance": 0.5}, "serving.speculative.tokens"),
        ({"method": "draft", "tokens": 2, "acceptance": -0.1}, "serving.speculative.acceptance"),
        ({"method": "draft", "tokens": 2, "acceptance": 1.0}, "serving.speculative.acceptance"),
        ({"method": "medusa", "tokens": 2, "acceptance": 0.5}, "serving.speculative.method"),
    ):
        with pytest.raises(SettingError) as err:
            serving_overrides({"speculative": block}, LLAMA_8B, (LLAMA_70B,))
        assert err.value.field == field
    with pytest.raises(SettingError) as err:  # a draft larger than the target
        serving_overrides({"speculative": {"method": "draft", "tokens": 2, "acceptance": 0.5}},
                          LLAMA_70B, (LLAMA_8B,))  # fmt: skip
    assert err.value.field == "serving.speculative.draft_model"


# ---------------------------------------------------------------------------- prefix cache
def test_prefix_is_pinned_once_and_skipped_in_prefill():
    c = CandidateArrays.build(LLAMA_8B, H100, "bf16").with_prefix(2000, 1.0)
    # 2,000 tokens x 131,072 B/token, once per replica
    assert pinned_prefix_bytes_per_gpu(c)[0] == 2000 * 131072
    op = closed_loop(c, fit_memory(c, 3200), 3000, 200, 8)
    assert op.prefill_isl_tokens[0] == 1000  # 3,000 - 2,000 cached (whole 16-token blocks)


def test_prefix_cache_mean_value_and_simulator_agree():
    # the same workload through both paths, with and without a 2,000-token shared prefix
    c = CandidateArrays.build(LLAMA_8B, H100, "bf16")
    w = {"requests": 320, "concurrency": 32, "warmup_requests": 64}
    mv = [closed_loop(x, fit_memory(x, 3200), 3000, 200, 32).output_tokens_per_s[0]
          for x in (c, c.with_prefix(2000, 1.0))]  # fmt: skip
    sim = [simulate(c, Workload(LengthDist(3000), LengthDist(200), shared_prefix_tokens=p,
                                prefix_hit_rate=h, **w)).output_tokens_per_s
           for p, h in ((0, 0), (2000, 1.0))]  # fmt: skip
    gains = mv[1] / mv[0], sim[1] / sim[0]
    # 1.49x vs 1.46x throughput from the cache; each path's level within 5 %
    assert gains[0] == pytest.approx(gains[1], rel=0.05)
    assert mv[1] == pytest.approx(sim[1], rel=0.05)


def test_plan_prefix_numbers_change_only_when_a_prefix_is_given():
    cand = Candidate(LLAMA_8B, H100, "bf16")
    slo, policy = Slo(2000, 50), Policy()
    base = plan(Traffic(20, 20, 3000, 200), slo, policy, [cand], tails=None).rows[0]
    zero = plan(Traffic(20, 20, 3000, 200, shared_prefix_tokens=2000), slo, policy, [cand],
                tails=None).rows[0]  # fmt: skip
    hit = plan(Traffic(20, 20, 3000, 200, shared_prefix_tokens=2000, prefix_hit_rate=0.9),
               slo, policy, [cand], tails=None).rows[0]  # fmt: skip
    assert zero.requests_per_s_per_replica == base.requests_per_s_per_replica
    assert hit.requests_per_s_per_replica > base.requests_per_s_per_replica
    assert {"prefix_cached_tokens", "prefill_isl_tokens"} <= {s.name for s in hit.derivation}


# ---------------------------------------------------------------------------- routing
def test_hit_rate_per_policy():
    assert routing.hit_rate("random", 50, 1000, 8) == 0.05
    assert routing.hit_rate("least_loaded", 50, 1000, 8) == 0.05
    assert routing.hit_rate("prefix_affinity", 50, 1000, 8) == 0.4
    assert routing.hit_rate("prefix_affinity", 50, 100, 8) == 1.0
    assert routing.hit_rate("random", 50, 1000, 1) == routing.hit_rate(
        "prefix_affinity", 50, 1000, 1
    )


def test_affinity_imbalance_against_balls_into_bins():
    assert routing.load_imbalance("random", 1000, 8) == 1.0
    assert routing.load_imbalance("prefix_affinity", 1000, 1) == 1.0
    # 4 prefixes on 8 replicas: at least R / D = 2 (4 idle replicas); ~3.2 with collisions
    assert routing.load_imbalance("prefix_affinity", 4, 8) >= 2.0
    # the hottest of 8 bins when 1,000 equal prefixes hash at random (Monte Carlo)
    rng = np.random.default_rng(0)
    hottest = [np.bincount(rng.integers(0, 8, 1000), minlength=8).max() / 125 for _ in range(400)]
    assert routing.load_imbalance("prefix_affinity", 1000, 8) == pytest.approx(
        np.mean(hottest), rel=0.06
    )  # 1.182 vs ~1.13


def test_plan_with_routing_shows_hit_rate_and_costs_affinity_its_imbalance():
    traffic = Traffic(40, 40, 3000, 200, shared_prefix_tokens=2000)
    slo, policy = Slo(2000, 50), Policy()

    def row(policy_name):
        e = EngineSettings(routing=policy_name, distinct_prefixes=400)
        return plan(traffic, slo, policy, [Candidate(LLAMA_8B, H100, "bf16", engine=e)],
                    tails=None).rows[0]  # fmt: skip

    rand, aff = row("random"), row("prefix_affinity")
    hit = [next(s.value for s in r.derivation if s.name == "prefix_hit_rate") for r in (rand, aff)]
    assert hit[1] > hit[0] > 0
    load = next(s.value for s in aff.derivation if s.name == "hottest_replica_load")
    assert load > 1.0
    assert next(s.value for s in rand.derivation if s.name == "hottest_replica_load") == 1.0


def test_every_new_formula_step_evaluates_to_the_value_shown():
    from sizing.derivation import evaluate

    traffic = Traffic(10, 10, 3000, 200, prompt_tokens_p95=9000, shared_prefix_tokens=2000)
    engines = [
        spec_engine(LLAMA_70B),
        EngineSettings(routing="prefix_affinity", distinct_prefixes=50, max_model_len=16384),
        spec_engine(LLAMA_70B, method="eagle", tokens=3, acceptance=0.6),
    ]
    cands = [Candidate(LLAMA_70B, H100, "fp8", Parallelism(tp=4), engine=e) for e in engines]
    rows = plan(traffic, Slo(3000, 40), Policy(), cands, tails=None).rows
    checked = 0
    for row in rows:
        for s in row.derivation:
            if s.kind == "formula":
                assert evaluate(s.formula, s.inputs) == pytest.approx(s.value, rel=1e-9), s.name
                checked += 1
    assert checked > 100
