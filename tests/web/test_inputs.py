"""Inputs that are easy to give: models and GPUs as searchable checkbox lists, the calibration
profile as a choice of the valid ones, and importing a model (UI and API) that only its
importer sees, checked as ``manage.py import_hf_config`` checks it."""

import json
import re
from html import unescape

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from fleets.models import ModelArchitecture
from planner.models import Scenario
from planner.services import sizing_run_start
from tests.factories import UserFactory, make_scenario
from tests.web.conftest import form_post

NON_LM = {"model_type": "vit", "hidden_size": 768, "image_size": 224}


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def llama8b_config() -> dict:
    return dict(ModelArchitecture.objects.get(slug="llama-3.1-8b").config_json)


def test_models_and_gpus_are_checkbox_lists_and_the_profile_a_choice(owner_client, catalog):
    html = owner_client.get("/scenarios/new/").content.decode()
    assert "<select multiple" not in html and 'size="8"' not in html
    for name in ("models", "gpus"):
        block = re.search(rf'<div class="checks checklist" id="id_{name}"[^>]*>(.*?)</div>', html)
        assert block, name
        assert 'data-checklist="' in block.group(0)
        assert block.group(1).count('type="checkbox"') >= 10
    assert 'value="llama-3.1-8b"' in html and "Llama 3.1 8B · 8.03B · GQA" in html
    profile = re.search(r'<select name="calibration_profile"[^>]*>(.*?)</select>', html, re.S)
    options = re.findall(r'<option value="([^"]*)"', profile.group(1))
    # the shipped profiles are per generation: each says which GPUs it pins
    assert options[0] == "" and "hopper / vllm 0.21 (newest)" in options
    assert "every NVIDIA Hopper GPU · vLLM 0.21 (newest) · ±" in unescape(profile.group(1))
    assert not [o for o in options if o.startswith("gen:")]  # names, not internal keys


def test_an_unknown_or_foreign_profile_is_refused_beside_its_field(owner_client, catalog):
    response = owner_client.post(
        "/scenarios/new/",
        form_post(calibration_profile="blackwell / vllm 0.21 (newest)", gpus=["h100_sxm"]),
    )
    assert response.status_code == 400
    assert "is for a GPU not among the GPUs" in response.content.decode()
    response = owner_client.post("/scenarios/new/", form_post(calibration_profile="made up"))
    assert response.status_code == 400 and not Scenario.objects.exists()


def test_a_pinned_profile_calibrates_its_gpu_in_the_run(catalog, owner):
    # given a vLLM scenario that pins Hopper's TensorRT-LLM 1.3 profile
    pinned = "hopper / trtllm 1.3 (newest)"
    scenario = make_scenario(
        owner=owner,
        models=["llama-3.1-8b"],
        gpus=["H100", "H200", "B200"],
        precisions=["fp8"],
        calibration_profile=pinned,
    )
    run = sizing_run_start(scenario=scenario)
    # then both Hopper GPUs use it for every precision, and the B200 keeps its best match
    calibrations = run.inputs["calibrations"]
    for key in ("h100_sxm", "h100_sxm|fp8", "h200_sxm", "h200_sxm|fp8"):
        assert calibrations[key]["name"] == pinned, key
    assert calibrations["b200"]["name"].startswith("blackwell / vllm")
    trtllm = calibrations["h100_sxm"]
    plain = sizing_run_start(scenario=make_scenario(owner=owner, models=["llama-3.1-8b"]))
    vllm = plain.inputs["calibrations"]["h100_sxm"]
    assert vllm["name"].startswith("hopper / vllm")
    assert trtllm != vllm  # the pin changed the constants, not only the label


def test_the_api_refuses_an_unknown_profile_by_its_path(catalog, owner):
    from planner import scenario_io
    from tests.factories import scenario_data

    body = scenario_io.nest(scenario_data(calibration_profile="nope"))
    response = api_for(owner).post("/api/v1/scenarios/", body, format="json")
    assert response.status_code == 400
    assert "candidates.calibration_profile" in response.json()["errors"]


def test_import_a_pasted_config_that_only_its_owner_sees(owner_client, owner, catalog):
    # when the owner pastes a config.json under their own name
    response = owner_client.post(
        "/models/", {"name": "acme/bot-8b", "config_text": json.dumps(llama8b_config())}
    )
    # then it is theirs, sized like its base, and offered in their scenario form
    assert response.status_code == 302
    row = ModelArchitecture.objects.get(hf_id="acme/bot-8b")
    assert row.owner == owner and row.num_layers == 32
    assert row.total_params == ModelArchitecture.objects.get(slug="llama-3.1-8b").total_params
    assert "bot-8b · 8.03B · GQA · yours" in owner_client.get("/scenarios/new/").content.decode()
    scenario = make_scenario(owner=owner, models=["acme/bot-8b"], gpus=["H100"])
    assert list(scenario.candidate_models.values_list("hf_id", flat=True)) == ["acme/bot-8b"]
    # and nobody else sees or resolves it
    other = UserFactory(username="other")
    api = api_for(other)
    assert "acme/bot-8b" not in [
        m["hf_id"] for m in api.get("/api/v1/models/?limit=500").json()["results"]
    ]
    assert api.get(f"/api/v1/models/{row.pk}/").status_code == 404
    from planner import scenario_io
    from tests.factories import scenario_data

    body = scenario_io.nest(scenario_data(models=["acme/bot-8b"]))
    refused = api.post("/api/v1/scenarios/", body, format="json")
    assert refused.status_code == 400
    assert "unknown model 'acme/bot-8b'" in refused.json()["errors"]["candidates.models"][0]
    owner_client.force_login(other)
    assert "bot-8b" not in owner_client.get("/scenarios/new/").content.decode()


def test_import_from_a_catalog_family_and_from_a_file(owner_client, owner, catalog, tmp_path):
    from django.core.files.uploadedfile import SimpleUploadedFile

    owner_client.post("/models/", {"name": "acme/scout-tune", "base": "llama-4-scout"})
    row = ModelArchitecture.objects.get(hf_id="acme/scout-tune")
    assert row.owner == owner and row.num_experts == 16
    assert row.source.startswith("architecture of meta-llama/Llama-4-Scout")
    upload = SimpleUploadedFile("config.json", json.dumps(llama8b_config()).encode())
    owner_client.post("/models/", {"name": "acme/file-8b", "config_file": upload})
    assert ModelArchitecture.objects.get(hf_id="acme/file-8b").owner == owner


def test_the_ui_refuses_what_the_command_refuses(owner_client, catalog, tmp_path):
    # given a config the sizing cannot use
    path = tmp_path / "config.json"
    path.write_text(json.dumps(NON_LM))
    with pytest.raises(CommandError) as refused:
        call_command("import_hf_config", str(path), "--name", "acme/vit")
    reason = str(refused.value).removeprefix("config.json: ").removesuffix("; nothing imported")
    # when it is pasted in the UI, the same reason comes back beside the field, nothing saved
    response = owner_client.post(
        "/models/", {"name": "acme/vit", "config_text": json.dumps(NON_LM)}
    )
    assert response.status_code == 400
    html = unescape(response.content.decode())
    assert reason in html and "missing key 'num_hidden_layers'" in html
    assert 'href="#id_config_text"' in html
    assert not ModelArchitecture.objects.filter(hf_id="acme/vit").exists()
    # no source, two sources, and a catalog name are refused too
    assert owner_client.post("/models/", {"name": "x"}).status_code == 400
    both = {"name": "x", "config_text": "{}", "base": "llama-3.1-8b"}
    assert owner_client.post("/models/", both).status_code == 400
    taken = owner_client.post(
        "/models/", {"name": "meta-llama/Llama-3.1-8B", "base": "llama-3.1-8b"}
    )
    assert "is taken" in taken.content.decode()


def test_api_import_json_then_update_and_refusals(catalog, owner):
    api = api_for(owner)
    body = {"name": "acme/api-8b", "config": llama8b_config()}
    created = api.post("/api/v1/models/import/", body, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["owner"] == owner.username and created.json()["num_layers"] == 32
    again = api.post("/api/v1/models/import/", body, format="json")
    assert again.status_code == 200 and again.json()["id"] == created.json()["id"]
    bad = api.post("/api/v1/models/import/", {"name": "acme/vit", "config": NON_LM}, format="json")
    assert bad.status_code == 400
    assert "num_hidden_layers" in bad.json()["errors"]["config"][0]
    other = api_for(UserFactory(username="other"))
    taken = other.post("/api/v1/models/import/", body, format="json")
    assert taken.status_code == 400 and "is taken" in taken.json()["errors"]["name"][0]
    assert ModelArchitecture.objects.filter(owner__isnull=False).count() == 1
