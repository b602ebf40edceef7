"""Contract: the derivation shown is the computation done.

Every ``formula`` step the chain emits is a Python expression over its listed inputs;
evaluating it must give the value shown, for every model in the catalog (dense, GQA, MLA,
MoE, sliding-window and hybrid linear-attention families), fitting or not.
"""

import math

import pytest

from fleets.models import GpuSku, ModelArchitecture
from fleets.selectors import gpu_spec, model_spec
from sizing.chain import Candidate, plan
from sizing.derivation import KINDS, evaluate
from sizing.specs import ApiPrice, Parallelism, Policy, Slo, Traffic

TRAFFIC = Traffic(peak_rps=20, mean_rps=8, prompt_tokens_mean=1000, output_tokens_mean=300)
SLO = Slo(ttft_ms=2000, tpot_ms=50)
POLICY = Policy(target_utilization=0.7, spare_replicas=1, burst_factor=1.2)
API = ApiPrice(0.88, 0.88, label="an API")


def _close(shown, computed) -> bool:
    if isinstance(shown, str):
        return False
    if math.isinf(shown) or math.isinf(computed):
        return shown == computed
    return math.isclose(shown, computed, rel_tol=1e-9, abs_tol=1e-9)


def check_steps(steps) -> int:
    checked = 0
    for s in steps:
        assert s.kind in KINDS, s
        assert s.inputs or s.kind != "formula", f"{s.name} lists no inputs"
        if s.kind != "formula":
            continue
        computed = evaluate(s.formula, s.inputs)
        assert _close(s.value, computed), f"{s.name}: {s.formula} = {computed}, shown {s.value}"
        checked += 1
    return checked


@pytest.mark.django_db
def test_every_formula_step_evaluates_to_the_value_shown_for_every_catalog_model(catalog):
    # given every catalog model on an 8-GPU B200 node and on one L40S (some do not fit)
    gpus = [gpu_spec(GpuSku.objects.get(slug=s), 5.0) for s in ("b200", "l40s")]
    candidates = []
    for row in ModelArchitecture.objects.order_by("slug"):
        spec = model_spec(row)
        for gpu in gpus:
            for precision, tp in (("bf16", 8), ("fp8", 1)):
                if spec.num_attention_heads % tp:
                    continue
                candidates.append(Candidate(spec, gpu, precision, Parallelism(tp=tp)))
    # when the whole chain runs with an API alternative
    result = plan(TRAFFIC, SLO, POLICY, candidates, API)
    # then each formula step recomputes to its shown value from its shown inputs
    checked = sum(check_steps(row.derivation) for row in result.rows)
    assert sum(r.fits for r in result.rows) > 20 and sum(not r.fits for r in result.rows) > 5
    formula_share = checked / sum(len(r.derivation) for r in result.rows)
    assert formula_share > 0.8, formula_share


@pytest.mark.django_db
def test_every_disaggregated_formula_step_evaluates_for_every_catalog_model(catalog):
    # given every catalog model as a disaggregated candidate on an 8-GPU B200 node, fp8
    from sizing.disagg_plan import plan_disagg

    gpu = gpu_spec(GpuSku.objects.get(slug="b200"), 5.0)
    candidates = [
        Candidate(model_spec(row), gpu, "fp8") for row in ModelArchitecture.objects.order_by("slug")
    ]
    # when each is planned with separate prefill and decode pools
    rows = plan_disagg(candidates, TRAFFIC, SLO, POLICY, API)
    # then each formula step recomputes to its shown value from its shown inputs
    checked = sum(check_steps(row.derivation) for row in rows)
    assert sum(r.fits for r in rows) > 15 and checked > 30 * sum(r.fits for r in rows)
