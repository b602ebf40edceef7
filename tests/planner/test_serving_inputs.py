"""Engine settings and serving techniques through every door: API body, snapshot, predict CSV."""

import copy
import dataclasses
import io
import json
from pathlib import Path

import pytest

from fleets.models import GpuSku, ModelArchitecture
from fleets.selectors import model_spec
from planner import snapshot as snap
from planner.models import Scenario
from planner.predict_io import Resolver, predict_csv
from planner.selectors import catalog_index, gpu_spec
from planner.services import build_inputs_snapshot
from sizing.candidates import CandidateArrays
from sizing.engine_settings import binding_setting
from sizing.memory import R_MODEL_LEN_KV, fit_memory
from sizing.operating import kv_sequences_live
from sizing.specs import EngineSettings

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    from rest_framework.test import APIClient

    from tests.factories import UserFactory

    client = APIClient()
    client.force_authenticate(UserFactory(username="engineer"))
    return client


ROOT = Path(__file__).resolve().parents[2]
BODY = json.loads((ROOT / "examples" / "chat-llama70b.json").read_text())


def body(**blocks):
    data = copy.deepcopy(BODY)
    data.update(blocks)
    return data


def test_engine_and_serving_blocks_round_trip_and_reach_the_snapshot(catalog, api):
    engine = {"gpu_memory_utilization": 0.95, "max_num_seqs": 256, "max_num_batched_tokens": 2048}
    serving = {
        "speculative": {"method": "draft", "draft_model": "Llama 3.1 8B", "tokens": 4,
                        "acceptance": 0.7},
        "routing": "prefix_affinity",
        "distinct_prefixes": 200,
    }  # fmt: skip
    response = api.post("/api/v1/scenarios/", body(engine=engine, serving=serving), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["engine"] == engine
    assert response.json()["serving"]["routing"] == "prefix_affinity"
    scenario = Scenario.objects.get()
    inputs = build_inputs_snapshot(scenario, None)
    [core, *_] = snap.candidates(inputs)
    assert (core.engine.gpu_memory_utilization, core.engine.max_num_seqs) == (0.95, 256)
    assert core.engine.max_num_batched_tokens == 2048
    assert core.engine.spec_method == "draft" and core.engine.spec_tokens == 4
    assert core.engine.spec_draft_params == pytest.approx(8.03e9, rel=0.01)
    assert core.engine.routing == "prefix_affinity" and core.engine.distinct_prefixes == 200


def test_defaults_leave_the_snapshot_engine_as_before(catalog, api):
    assert api.post("/api/v1/scenarios/", body(), format="json").status_code == 201
    inputs = build_inputs_snapshot(Scenario.objects.get(), None)
    assert snap.candidates(inputs)[0].engine == EngineSettings(engine="vllm")


BAD = [
    ({"engine": {"gpu_memory_utilization": 1.2}}, "engine.gpu_memory_utilization"),
    ({"engine": {"gpu_memory_utilization": 0}}, "engine.gpu_memory_utilization"),
    ({"engine": {"max_num_batched_tokens": 8}}, "engine.max_num_batched_tokens"),
    ({"serving": {"speculative": {"method": "eagle", "tokens": 0, "acceptance": 0.5,
                                  "head_params": 1e9}}}, "serving.speculative.tokens"),
    ({"serving": {"speculative": {"method": "eagle", "tokens": 3, "acceptance": 1.0,
                                  "head_params": 1e9}}}, "serving.speculative.acceptance"),
    ({"serving": {"speculative": {"method": "draft", "tokens": 3, "acceptance": 0.6,
                                  "draft_model": "Llama 3.1 405B"}}},
     "serving.speculative.draft_model"),
    ({"serving": {"lora": {"adapters": 300, "rank": 0}}}, "serving.lora.rank"),
    ({"serving": {"disaggregation": "sometimes"}}, "serving.disaggregation"),
]  # fmt: skip


def test_bad_settings_are_refused_naming_the_field_and_nothing_is_saved(catalog, api):
    for blocks, field in BAD:
        response = api.post("/api/v1/scenarios/", body(**blocks), format="json")
        assert response.status_code == 400, response.json()
        assert field in response.json()["errors"], (field, response.json())
        assert not Scenario.objects.exists()


def _resolver():
    index = catalog_index()
    return Resolver(
        lambda name: model_spec(ModelArchitecture.objects.get(pk=index.model_id(name))),
        lambda name: gpu_spec(GpuSku.objects.get(pk=index.gpu_id(name)), 2.0),
    )


HEADER = "model,gpu,num_gpus,tp,pp,ep,weight_precision,kv_precision,isl,osl,concurrency"


def _predict(extra_header: str, rows: list[str]) -> list[dict]:
    import csv

    text = "\n".join([HEADER + extra_header, *rows]) + "\n"
    out = io.StringIO()
    predict_csv(io.StringIO(text), out, _resolver())
    return list(csv.DictReader(io.StringIO(out.getvalue())))


def test_predict_columns_change_the_answer_and_blank_means_default(catalog):
    base = "Llama 3.1 8B,H100,1,1,1,1,bf16,,2000,200,16"
    rows = _predict(
        ",gpu_memory_utilization,max_num_seqs,max_num_batched_tokens,max_model_len,"
        "prefix_tokens,prefix_hit_rate,spec_method,spec_tokens,spec_acceptance",
        [
            base + ",,,,,,,,,",
            base + ",0.5,,,,,,,,",
            base + ",,,1024,,,,,,",
            base + ",,,,,1500,1,,,",
            base + ",,,,,,,mtp,2,0.8",
            base + ",1.5,,,,,,,,",
            base + ",,,,,,,eagle,0,0.8",
            base + ",,,,,,,eagle,2,1",
        ],
    )
    plain = _predict("", [base])[0]
    mixed = _predict(",expert_precision", [base + ",fp4", base + ",fp3"])
    assert mixed[0]["tpot_ms"] == plain["tpot_ms"]  # a dense model has no routed experts
    assert mixed[1]["fits"] == "false" and mixed[1]["reason"].startswith("expert_precision")
    assert rows[0]["kv_capacity_tokens"] == plain["kv_capacity_tokens"]
    assert rows[0]["ttft_ms"] == plain["ttft_ms"]
    assert float(rows[1]["kv_capacity_tokens"]) < float(plain["kv_capacity_tokens"])
    assert rows[1]["engine_binding"].startswith("gpu_memory_utilization binds")
    assert "engine_binding" not in plain  # only when an engine column is given
    # a 1,024-token budget: the closed-loop wave of 16 prompts is prefilled in smaller steps
    assert rows[2]["ttft_ms"] != plain["ttft_ms"] and rows[2]["tpot_ms"] != plain["tpot_ms"]
    assert float(rows[3]["ttft_ms"]) < float(plain["ttft_ms"])  # 1,488 of 2,000 cached
    assert float(rows[4]["tpot_ms"]) < float(plain["tpot_ms"])  # 2.44 tokens per step
    for row, column in zip(rows[5:], ("gpu_memory_utilization", "spec_tokens", "spec_acceptance"),
                           strict=True):  # fmt: skip
        assert row["fits"] == "false" and row["reason"].startswith(column), row["reason"]


def test_kimi_k2_int4_on_8_h100_at_full_context_fits_only_above_090(catalog):
    # given Kimi K2 int4 experts on 8x H100 with max_model_len at the model's 131,072 tokens
    kimi = model_spec(ModelArchitecture.objects.get(slug="kimi-k2"))
    h100 = gpu_spec(GpuSku.objects.get(slug="h100_sxm"), 2.0)

    def fit(utilization):
        e = EngineSettings(gpu_memory_utilization=utilization, max_model_len=131072)
        c = CandidateArrays.build(kimi, h100, "int4", None, 8, 1, 8, 1, e)
        return c, fit_memory(c, 2000)

    # then at vLLM's default 0.90 one full-context sequence does not fit: the engine would
    # refuse to start, and the memory fit says which settings would change that
    c, f = fit(0.90)
    assert f.reason_code[0] == R_MODEL_LEN_KV
    text = binding_setting(c, f, kv_sequences_live(c, f, 1000, 1000), 0)
    assert (
        "max_model_len 131,072 binds" in text and "gpu_memory_utilization 0.90 binds: 0.95" in text
    )
    # and at 0.95 it fits, by a few hundredths of a GB
    c, f = fit(0.95)
    assert f.fits[0]
    assert 0 < f.kv_budget_bytes_per_gpu[0] - 9.21e9 < 0.1e9


# ---------------------------------------------------------------------------- mixed precision
def test_serving_precision_reaches_every_candidate_of_the_snapshot(catalog, api):
    # given gpt-oss-120b as its checkpoint ships: MXFP4 experts, bf16 attention and embeddings
    serving = {"precision": {"experts": "mxfp4", "attention": "bf16", "kv": "fp8",
                             "embeddings": "bf16"}}  # fmt: skip
    data = body(serving=serving)
    data["candidates"] = {"models": ["gpt-oss-120b"], "gpus": ["H100"], "precisions": ["fp8"]}
    response = api.post("/api/v1/scenarios/", data, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["serving"]["precision"]["experts"] == "mxfp4"
    inputs = build_inputs_snapshot(Scenario.objects.get(), None)
    cores = snap.candidates(inputs)
    # then attention replaces the swept precision, and each component is on every candidate
    assert {k.weight_precision for k in cores} == {"bf16"}
    assert {(k.expert_precision, k.kv_precision, k.embedding_precision) for k in cores} == {
        ("mxfp4", "fp8", "bf16")
    }
    # and it fits one 80 GB H100, which the model at bf16 throughout does not
    from sizing.chain import candidate_arrays

    c = candidate_arrays(cores[:1])
    assert fit_memory(c, 2000).fits[0]
    assert not fit_memory(candidate_arrays([dataclasses.replace(cores[0],
                                            expert_precision="bf16")]), 2000).fits[0]  # fmt: skip


def test_gpt_oss_keeps_its_published_mxfp4_experts_unless_the_scenario_names_them(catalog, api):
    # given gpt-oss-120b swept over bf16 and fp8 with no serving precision: its config.json
    # says the checkpoint quantizes only the experts (MXFP4), which every engine serves as is
    data = body()
    data["candidates"] = {"models": ["gpt-oss-120b", "Llama 3.1 8B"], "gpus": ["H100"],
                          "precisions": ["bf16", "fp8"]}  # fmt: skip
    response = api.post("/api/v1/scenarios/", data, format="json")
    assert response.status_code == 201, response.json()
    cores = snap.candidates(build_inputs_snapshot(Scenario.objects.get(), None))
    # then the sweep varies the attention and dense weights; the core keeps the experts MXFP4
    from sizing.chain import candidate_arrays
    from sizing.memory import weights_bytes_total

    c = candidate_arrays(cores)
    assert {
        (k.model.name, k.weight_precision, c.expert_precision(i)) for i, k in enumerate(cores)
    } == {
        ("gpt-oss-120b", "bf16", "mxfp4"),
        ("gpt-oss-120b", "fp8", "mxfp4"),
        ("Llama 3.1 8B", "bf16", "bf16"),
        ("Llama 3.1 8B", "fp8", "fp8"),
    }
    # and the disaggregated pools, which size no mixed checkpoint yet, are offered Llama only
    split = {k.model.name for k in cores if k.label.endswith("|disagg")}
    assert split == {"Llama 3.1 8B"}
    # and at bf16 it is the published 65.3 GB checkpoint, which fits one 80 GB H100

    [published] = [k for k in cores if k.model.name == "gpt-oss-120b"
                   and k.weight_precision == "bf16" and k.parallelism.tp == 1]  # fmt: skip
    assert weights_bytes_total(candidate_arrays([published]))[0] == pytest.approx(65.3e9, rel=0.005)
    # and a scenario that names the experts' precision gets its own
    named = body(serving={"precision": {"experts": "fp4"}})
    named["candidates"] = {"models": ["gpt-oss-120b"], "gpus": ["H100"], "precisions": ["bf16"]}
    assert api.post("/api/v1/scenarios/", named, format="json").status_code == 201
    scenario = Scenario.objects.order_by("-pk").first()
    assert {k.expert_precision for k in snap.candidates(build_inputs_snapshot(scenario, None))} == {
        "fp4"
    }


def test_predict_reads_a_blank_experts_precision_as_the_published_checkpoint(catalog):
    # given gpt-oss-120b on one H100 at bf16, the experts' precision blank, mxfp4, and bf16
    base = "gpt-oss-120b,H100,1,1,1,1,bf16,,1000,200,16"
    blank, mxfp4, bf16 = _predict(",expert_precision", [base + ",", base + ",mxfp4",
                                                        base + ",bf16"])  # fmt: skip
    # then blank is the checkpoint as published (65 GB: it fits), the same as naming mxfp4
    assert blank["fits"] == "true", blank["reason"]
    assert {k: v for k, v in blank.items() if k != "expert_precision"} == {
        k: v for k, v in mxfp4.items() if k != "expert_precision"
    }
    # and bf16 experts (234 GB) do not fit one 80 GB GPU
    assert bf16["fits"] == "false"


BAD_MIXED = [
    ({"serving": {"precision": {"experts": "fp3"}}}, "serving.precision.experts"),
    ({"serving": {"precision": {"kv": "int2"}}}, "serving.precision.kv"),
    ({"traffic": {**BODY["traffic"], "images_per_request": -1}}, "traffic.images_per_request"),
    ({"traffic": {**BODY["traffic"], "images_per_request": 1, "tokens_per_image": 0}},
     "traffic.tokens_per_image"),
    ({"traffic": {**BODY["traffic"], "images_per_request": 1000, "tokens_per_image": 100000}},
     "traffic.images_per_request"),
    # Llama 3.1 70B has no vision config: images need their token count given
    ({"traffic": {**BODY["traffic"], "images_per_request": 2}}, "traffic.tokens_per_image"),
]  # fmt: skip


def test_bad_precision_and_image_input_is_refused_naming_the_field(catalog, api):
    for blocks, field in BAD_MIXED:
        response = api.post("/api/v1/scenarios/", body(**blocks), format="json")
        assert response.status_code == 400, response.json()
        assert field in response.json()["errors"], (field, response.json())
        assert not Scenario.objects.exists()


# ---------------------------------------------------------------------------- images
def test_images_reach_the_snapshot_and_the_vision_config_sets_the_tokens(catalog, api):
    traffic = {**BODY["traffic"], "images_per_request": 2, "image_tiles": 1, "tile_px": 448}
    data = body(traffic=traffic)
    data["candidates"] = {"models": ["Qwen3.5-397B-A17B"], "gpus": ["B200"],
                          "precisions": ["fp8"]}  # fmt: skip
    response = api.post("/api/v1/scenarios/", data, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["traffic"]["images_per_request"] == 2
    inputs = build_inputs_snapshot(Scenario.objects.get(), None)
    t = snap.traffic(inputs)
    assert (t.images_per_request, t.tile_px) == (2, 448)
    [core, *_] = snap.candidates(inputs)
    assert (core.model.vision_patch_size, core.model.vision_merge) == (16, 4)
    from sizing.vision import tokens_per_image

    assert tokens_per_image(core.model, t) == 196  # (448 / 16)^2 / 4


def test_predict_columns_for_components_and_images(catalog):
    base = "Llama 3.1 8B,H100,1,1,1,1,fp8,,2000,200,16"
    plain = _predict("", [base])[0]
    rows = _predict(
        ",embedding_precision,images_per_request,tokens_per_image",
        [base + ",fp8,,", base + ",,1,256", base + ",,1,", base + ",fp5,,", base + ",,-1,"],
    )
    assert float(rows[0]["weights_gb_per_gpu"]) < float(plain["weights_gb_per_gpu"])
    assert float(rows[1]["ttft_ms"]) > float(plain["ttft_ms"])  # 256 more prompt tokens
    for row, column in zip(rows[2:], ("tokens_per_image", "embedding_precision",
                                      "images_per_request"), strict=True):  # fmt: skip
        assert row["fits"] == "false" and row["reason"].startswith(column), row["reason"]
    # Gemma 4's config states 280 tokens per image
    gemma = "Gemma 4 26B-A4B,H100,1,1,1,1,bf16,,1000,200,8"
    text, image = _predict(",images_per_request", [gemma + ",", gemma + ",1"])
    assert image["fits"] == "true", image["reason"]
    assert float(image["ttft_ms"]) > float(text["ttft_ms"])
    assert float(image["max_concurrency"]) < float(text["max_concurrency"])


def test_a_model_gets_its_own_components_and_unknown_models_are_refused(catalog, api):
    # given gpt-oss-120b (MXFP4 experts) next to Llama 3.1 8B (fp8 throughout)
    serving = {
        "precision": {
            "kv": "fp8",
            "models": {"gpt-oss-120b": {"experts": "mxfp4", "attention": "bf16"}},
        }
    }
    data = body(serving=serving)
    data["candidates"] = {"models": ["gpt-oss-120b", "Llama 3.1 8B"], "gpus": ["H100"],
                          "precisions": ["fp8"]}  # fmt: skip
    response = api.post("/api/v1/scenarios/", data, format="json")
    assert response.status_code == 201, response.json()
    cores = snap.candidates(build_inputs_snapshot(Scenario.objects.get(), None))
    by_model = {(k.model.name, k.weight_precision, k.expert_precision, k.kv_precision)
                for k in cores}  # fmt: skip
    assert by_model == {
        ("gpt-oss-120b", "bf16", "mxfp4", "fp8"),
        ("Llama 3.1 8B", "fp8", None, "fp8"),
    }
    # a model that is not a candidate, or not in the catalog, is refused by its path
    for name in ("Qwen3-32B", "no-such-model"):
        bad = body(serving={"precision": {"models": {name: {"experts": "fp4"}}}})
        response = api.post("/api/v1/scenarios/", bad, format="json")
        assert response.status_code == 400
        assert f"serving.precision.models.{name}" in response.json()["errors"], response.json()
    bad = body(serving={"precision": {"models": {"Llama 3.1 70B": {"kv": "fp2"}}}})
    response = api.post("/api/v1/scenarios/", bad, format="json")
    assert "serving.precision.models.Llama 3.1 70B.kv" in response.json()["errors"]


def test_the_vision_and_mixed_precision_example_plans(catalog):
    import io as _io

    from django.core.management import call_command

    out = _io.StringIO()
    path = ROOT / "examples" / "vision-mixed-precision.json"
    call_command("plan", str(path), "--json", "--no-tails", stdout=out)
    result = json.loads(out.getvalue())
    best = result["rows"][0]
    assert best["meets_slo"], best
    steps = {s["name"]: s for s in best["derivation"]["steps"]}
    assert steps["tokens_per_image"]["value"] == 280  # Gemma 4's vision_soft_tokens_per_image
    assert steps["prompt_tokens_with_images"]["value"] == 800 + 2 * 280
    assert "P_e * b_e" in steps["weights_bytes_total"]["formula"]


def test_predict_scheduler_recv_interval_adds_the_wait_for_the_next_poll(catalog):
    # given Llama 3.1 8B on one H100 at 16 clients, polling every step, every 30 decode
    # steps, and an interval of 0 (no such engine)
    base = "Llama 3.1 8B,H100,1,1,1,1,bf16,,2000,200,16"
    rows = _predict(",scheduler_recv_interval", [base + ",", base + ",30", base + ",0"])
    plain = _predict("", [base])[0]
    # then blank is the default, 30 lengthens TTFT (and nothing else's order), 0 is refused
    assert rows[0]["ttft_ms"] == plain["ttft_ms"] and rows[0]["tpot_ms"] == plain["tpot_ms"]
    assert float(rows[1]["ttft_ms"]) > float(plain["ttft_ms"]) + 50.0
    assert float(rows[1]["output_tok_s_per_gpu"]) < float(plain["output_tok_s_per_gpu"])
    assert rows[2]["fits"] == "false"
    assert rows[2]["reason"].startswith("scheduler_recv_interval"), rows[2]["reason"]


def test_the_api_engine_block_takes_the_scheduler_recv_interval(catalog, api):
    response = api.post(
        "/api/v1/scenarios/", body(engine={"scheduler_recv_interval": 30}), format="json"
    )
    assert response.status_code == 201, response.json()
    [core, *_] = snap.candidates(build_inputs_snapshot(Scenario.objects.get(), None))
    assert core.engine.scheduler_recv_interval == 30
    bad = api.post("/api/v1/scenarios/", body(engine={"scheduler_recv_interval": 0}), format="json")
    assert bad.status_code == 400 and "scheduler_recv_interval" in str(bad.json()["errors"])
