"""`predict` rows with an open-loop ``request_rate`` instead of a ``concurrency``."""

import csv
import io

import numpy as np
import pytest
from django.core.management import call_command

from fleets.calibration import CatalogSpecs, profile_selector
from sizing.chain import predict_rows
from sizing.specs import EngineSettings

pytestmark = pytest.mark.django_db

HEADER = "model,gpu,num_gpus,tp,pp,ep,weight_precision,kv_precision,isl,osl,concurrency,request_rate,engine\n"  # noqa: E501


def predict(tmp_path, body: str, *options: str) -> list[dict]:
    source = tmp_path / "in.csv"
    source.write_text(HEADER + body)
    out = tmp_path / "out.csv"
    call_command("predict", str(source), "-o", str(out), *options, stderr=io.StringIO())
    return list(csv.DictReader(out.open()))


def test_a_rate_row_is_the_open_loop_operating_point(catalog, tmp_path):
    # given 70B TP4 at 2 and 8 req/s with 467/256-token requests, and a closed-loop row
    rows = predict(
        tmp_path,
        "Llama-3.1-70B,H100,4,4,1,1,bf16,,467,256,,2,trtllm\n"
        "Llama-3.1-70B,H100,4,4,1,1,bf16,,467,256,,8,trtllm\n"
        "Llama-3.1-70B,H100,4,4,1,1,bf16,,467,256,16,,trtllm\n",
    )
    assert all(row["fits"] == "true" for row in rows)
    # then a rate row serves its rate: output tokens/s = rate x osl
    for row, rate in zip(rows[:2], (2.0, 8.0), strict=False):
        assert float(row["total_output_tok_s"]) == pytest.approx(rate * 256, rel=1e-3)
    # and latency rises with the rate
    assert float(rows[1]["ttft_ms"]) > float(rows[0]["ttft_ms"])
    assert float(rows[1]["tpot_ms"]) > float(rows[0]["tpot_ms"])
    # and the numbers are the core's open-loop point under the profile the row names
    specs = CatalogSpecs()
    calibration, label = profile_selector()("h100_sxm", "trtllm", "bf16", "")
    assert rows[0]["profile"] == label
    core = predict_rows(
        [specs.model("Llama-3.1-70B")[1]] * 2, specs.gpu("H100")[1], 4, 4, 1, 1, "bf16", None,
        467, 256, np.nan, engine=EngineSettings(engine="trtllm"),
        calibration=calibration,
        request_rate=np.array([2.0, 8.0]),
    )  # fmt: skip
    assert [float(row["ttft_ms"]) for row in rows[:2]] == pytest.approx(core.ttft_ms, rel=1e-5)
    assert [float(row["tpot_ms"]) for row in rows[:2]] == pytest.approx(core.tpot_ms, rel=1e-5)


@pytest.mark.parametrize(
    ("cells", "fragment"),
    [
        ("16,2", "request_rate and concurrency are two loads"),
        (",0", "request_rate must be above 0"),
        (",-3", "request_rate must be above 0"),
        (",fast", "request_rate is not a number"),
    ],
)
def test_bad_rates_are_refused_naming_the_field(catalog, tmp_path, cells, fragment):
    (row,) = predict(tmp_path, f"Llama-3.1-8B,H100,1,1,1,1,bf16,,467,256,{cells},vllm\n")
    assert row["fits"] == "false" and fragment in row["reason"]


def test_simulate_runs_poisson_arrivals_at_the_rate(catalog, tmp_path):
    # given 8B on one H100 at 4 req/s, simulated
    (row,) = predict(tmp_path, "Llama-3.1-8B,H100,1,1,1,1,bf16,,467,64,,4,vllm\n", "--simulate")
    # then the simulated run serves about the offered rate (1,000 requests, Poisson)
    assert row["fits"] == "true"
    assert float(row["total_output_tok_s"]) == pytest.approx(4 * 64, rel=0.15)
