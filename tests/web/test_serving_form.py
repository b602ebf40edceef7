"""The scenario form's engine settings, serving techniques and image inputs: what a UI user
sets reaches the same blocks the API writes, and bad values are refused beside their input by
the same validators."""

import pytest

from planner.models import Scenario
from tests.web.conftest import form_post

pytestmark = pytest.mark.django_db

SERVING = {
    "gpu_memory_utilization": "0.95",
    "max_num_seqs": "256",
    "max_num_batched_tokens": "2048",
    "scheduler_recv_interval": "30",
    "spec_method": "draft",
    "spec_draft_model": "Llama 3.1 8B",
    "spec_tokens": "4",
    "spec_acceptance": "0.7",
    "routing": "prefix_affinity",
    "distinct_prefixes": "200",
    "lora_adapters": "300",
    "lora_rank": "16",
    "lora_target_modules": "q_proj, v_proj",
    "lora_active_per_batch": "8",
    "precision_kv": "fp8",
    "images_per_request": "1",
    "tokens_per_image": "256",
}


def test_the_form_writes_the_engine_and_serving_blocks(owner_client, catalog):
    data = form_post(**SERVING, models=["llama-3.1-70b"])
    response = owner_client.post("/scenarios/new/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    scenario = Scenario.objects.get()
    assert scenario.engine_settings == {
        "gpu_memory_utilization": 0.95, "max_num_seqs": 256, "max_num_batched_tokens": 2048,
        "scheduler_recv_interval": 30,
    }  # fmt: skip
    assert scenario.serving == {
        "speculative": {"method": "draft", "draft_model": "Llama 3.1 8B", "tokens": 4,
                        "acceptance": 0.7},
        "routing": "prefix_affinity",
        "distinct_prefixes": 200,
        "lora": {"adapters": 300, "rank": 16, "target_modules": ["q_proj", "v_proj"],
                 "active_per_batch": 8.0},
        "precision": {"kv": "fp8"},
    }  # fmt: skip
    assert (scenario.images_per_request, scenario.tokens_per_image) == (1, 256)
    # and the edit form shows them again
    html = owner_client.get(f"/scenarios/{scenario.pk}/edit/").content.decode()
    for name, value in (
        ("spec_tokens", "4"),
        ("distinct_prefixes", "200"),
        ("lora_target_modules", "q_proj, v_proj"),
        ("max_num_seqs", "256"),
        ("scheduler_recv_interval", "30"),
    ):
        assert f'name="{name}" value="{value}"' in html, name  # fmt: skip


BAD = [
    ({"spec_method": "eagle", "spec_head_params": "1e9", "spec_tokens": "0",
      "spec_acceptance": "0.5"}, "spec_tokens"),
    ({"spec_method": "eagle", "spec_head_params": "1e9", "spec_tokens": "3",
      "spec_acceptance": "1"}, "spec_acceptance"),
    ({"spec_method": "draft", "spec_draft_model": "Llama 3.1 405B", "spec_tokens": "3",
      "spec_acceptance": "0.6"}, "spec_draft_model"),
    ({"lora_adapters": "300", "lora_rank": "0"}, "lora_rank"),
    ({"gpu_memory_utilization": "1.2"}, "gpu_memory_utilization"),
    ({"gpu_memory_utilization": "0"}, "gpu_memory_utilization"),
    ({"max_num_batched_tokens": "8"}, "max_num_batched_tokens"),
    ({"scheduler_recv_interval": "0"}, "scheduler_recv_interval"),
    ({"precision_experts": "fp3"}, "precision_experts"),
    ({"images_per_request": "2"}, "tokens_per_image"),  # a text model: give the count
]  # fmt: skip


def test_bad_serving_input_is_refused_beside_its_field(owner_client, catalog):
    for fields, name in BAD:
        response = owner_client.post("/scenarios/new/", form_post(**fields))
        assert response.status_code == 400, (name, response.status_code)
        html = response.content.decode()
        # the message sits in the field's own error slot
        assert f"id_{name}_errors" in html, (name, html[:500])
        assert not Scenario.objects.exists()


def test_an_edit_keeps_what_only_the_api_sets(owner_client, owner, catalog):
    # given a scenario whose serving block has per-position acceptance and per-model
    # precisions (API only)
    from planner.forms import initial_from_scenario
    from tests.factories import make_scenario

    spec = {"method": "eagle", "tokens": 2, "head_params": 2e8,
            "acceptance_by_position": [0.8, 0.6]}  # fmt: skip
    precision = {"models": {"llama-3.1-8b": {"kv": "fp8"}}}
    scenario = make_scenario(owner=owner, models=["llama-3.1-8b"], gpus=["H100"],
                             serving={"speculative": spec, "precision": precision})  # fmt: skip
    # when the form posts back what it shows, with one change
    initial = initial_from_scenario(scenario)
    assert initial["spec_tokens"] == 2 and "spec_acceptance" not in initial
    data = form_post(models=["llama-3.1-8b"], gpus=["h100_sxm"], spec_method="eagle",
                     spec_tokens="2", spec_head_params="2e8", routing="random",
                     distinct_prefixes="10")  # fmt: skip
    response = owner_client.post(f"/scenarios/{scenario.pk}/edit/", data)
    assert response.status_code == 302, response.content.decode()[:1500]
    scenario.refresh_from_db()
    # then the parts the form has no input for are kept
    assert scenario.serving["speculative"]["acceptance_by_position"] == [0.8, 0.6]
    assert scenario.serving["precision"] == precision
    assert scenario.serving["routing"] == "random"
