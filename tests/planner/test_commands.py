"""The `predict` and `plan` command-line contracts."""

import csv
import io
import json
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

ROOT = Path(__file__).resolve().parents[2]
HEADER = "model,gpu,num_gpus,tp,pp,ep,weight_precision,kv_precision,isl,osl,concurrency,engine\n"
pytestmark = pytest.mark.django_db


def predict(tmp_path, body: str) -> list[dict]:
    source = tmp_path / "in.csv"
    source.write_text(HEADER + body)
    out = tmp_path / "out.csv"
    call_command("predict", str(source), "-o", str(out), stderr=io.StringIO())
    return list(csv.DictReader(out.open()))


def test_predict_repeats_inputs_and_adds_the_columns(catalog, tmp_path):
    body = (
        "meta-llama/Llama-3.1-70B-Instruct,H100,1,1,,,bf16,,1000,1000,,\n"
        "Llama-3.3-70B,h100_sxm,2,2,,,fp8,fp8,1024,1024,64,trtllm\n"
    )
    rows = predict(tmp_path, body)
    assert list(rows[0])[:12] == HEADER.strip().split(",")
    assert list(rows[0])[12:] == [
        "fits",
        "reason",
        "weights_gb_per_gpu",
        "kv_bytes_per_token",
        "kv_capacity_tokens",
        "max_concurrency",
        "total_output_tok_s",
        "output_tok_s_per_gpu",
        "ttft_ms",
        "tpot_ms",
        "profile",
    ]
    # 70B in bf16 on one H100: 141.1 GB of weights > 85,520,809,984 B x 0.90 = 77.0 GB usable
    assert rows[0]["fits"] == "false"
    assert "weights 141.1 GB > 77.0 GB usable" in rows[0]["reason"]
    assert rows[0]["kv_bytes_per_token"] == "327680"  # 2 * 80 * 8 * 128 * 2 B
    # TP2 fp8: fits, KV is fp8 so half the bytes per token, throughput and latencies positive
    assert rows[1]["fits"] == "true" and rows[1]["kv_bytes_per_token"] == "163840"
    assert float(rows[1]["total_output_tok_s"]) > 0 and float(rows[1]["tpot_ms"]) > 0
    assert float(rows[1]["output_tok_s_per_gpu"]) == pytest.approx(
        float(rows[1]["total_output_tok_s"]) / 2, rel=1e-5
    )


@pytest.mark.parametrize(
    "row, fragment",
    [
        ("Llama-9-1T,H100,1,1,,,bf16,,100,100,1,", "unknown model 'Llama-9-1T'"),
        ("llama-3.1-8b,Voodoo5,1,1,,,bf16,,100,100,1,", "unknown GPU 'Voodoo5'"),
        ("Llama-3.1-70B,H100,3,3,,,bf16,,100,100,1,", "TP 3 does not divide"),
        ("llama-3.1-8b,H100,1,1,,,bf16,,lots,100,1,", "isl is not a number: 'lots'"),
        ("llama-3.1-8b,H100,1,1,,,bf17,,100,100,1,", "unknown precision 'bf17'"),
        ("llama-3.1-8b,H100,1,1,,,bf16,,100,0,1,", "osl must be a whole number"),
        ("llama-3.1-8b,H100,1,1,,,bf16,,100,100,1,tgi", "engine must be one of"),
    ],
)
def test_bad_rows_get_fits_false_and_a_reason_while_others_compute(
    catalog, tmp_path, row, fragment
):
    rows = predict(tmp_path, row + "\nllama-3.1-8b,H100,1,1,,,bf16,,100,100,1,\n")
    assert rows[0]["fits"] == "false" and fragment in rows[0]["reason"], rows[0]["reason"]
    assert rows[1]["fits"] == "true"


def test_predict_reads_an_unfitted_release_on_its_own_runtime(catalog, tmp_path):
    # given the same row at TensorRT-LLM releases the shipped fit has, and has not, seen
    source = tmp_path / "in.csv"
    rows = "".join(
        f"llama-3.1-8b,h100_sxm,1,1,,,bf16,,467,256,8,trtllm,{version}\n"
        for version in ("0.12", "0.14", "1.1", "")
    )
    source.write_text(HEADER.strip() + ",engine_version\n" + rows)
    out = tmp_path / "out.csv"
    call_command("predict", str(source), "-o", str(out), stderr=io.StringIO())
    profiles = [row["profile"] for row in csv.DictReader(out.open())]
    # then 0.12 (TensorRT engines, never fitted) reads 0.20, the newest fitted release of its
    # runtime, not 1.3's PyTorch backend; a fitted release is its own; none is the newest
    assert profiles[0] == "hopper / trtllm 0.20 / bf16", profiles
    assert profiles[1] == "hopper / trtllm 0.14 / bf16"
    assert profiles[2] == "hopper / trtllm 1.1 / bf16"
    assert profiles[3].startswith("hopper / trtllm 1.3")


def test_predict_unreadable_file_is_an_error(catalog, tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("predict", str(tmp_path / "missing.csv"))
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(CommandError, match="lacks required column"):
        call_command("predict", str(tmp_path / "x.csv"))


def test_predict_100k_rows(catalog, tmp_path):
    # speed is a benchmark figure (README), not a timed test on a shared machine
    lines = [
        "Llama-3.3-70B,H100,2,2,,,fp8,fp8,1024,1024,64,trtllm",
        "llama-3.1-8b,L40S,1,1,,,bf16,,512,256,,vllm",
        "DeepSeek-R1-0528,B200,8,8,1,8,fp4,fp8,1024,1024,256,sglang",
        "Qwen3-30B-A3B,H200,1,1,,,fp8,,2048,512,32,",
    ]
    body = "\n".join(lines[i % 4] for i in range(100_000)) + "\n"
    rows = predict(tmp_path, body)
    assert len(rows) == 100_000 and all(r["fits"] == "true" for r in rows[:4])


def test_plan_examples_rank_and_recommend(catalog):
    out = io.StringIO()
    call_command("plan", str(ROOT / "examples" / "chat-llama70b.json"), "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert result["rows"][0]["rank"] == 1 and result["rows"][0]["meets_slo"]
    per_gpu = {entry["gpu"]: entry for entry in result["per_gpu"]}
    assert set(per_gpu) == {"h100_sxm", "h200_sxm", "b200", "l40s"}
    best = per_gpu["h100_sxm"]["row"]
    assert per_gpu["h100_sxm"]["recommended"] == best["candidate_key"]
    assert best["usd_per_month"] == pytest.approx(best["usd_per_hour"] * 730)
    table = io.StringIO()
    call_command("plan", str(ROOT / "examples" / "chat-llama70b.json"), stdout=table)
    assert "Cheapest option meeting the SLOs, per GPU" in table.getvalue()
    # each GPU's line counts its band in what the answer is made of: a disaggregated
    # answer's band counts both pools' workers (as its card says), an aggregated one replicas
    lines = table.getvalue().splitlines()
    for entry in result["per_gpu"]:
        if not entry.get("row") or not entry["row"].get("derivation", {}).get("band"):
            continue
        [line] = [x for x in lines if x.startswith(f"  {entry['gpu_name']}: ")]
        unit = "workers" if entry["row"]["mode"] == "disagg" else "replicas"
        assert re.search(rf"; band \d+-\d+ {unit};", line), line


def test_plan_refuses_bad_documents_naming_the_field(catalog, tmp_path):
    document = json.loads((ROOT / "examples" / "chat-llama70b.json").read_text())
    document["traffic"]["output_tokens"]["p95"] = 10
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(CommandError, match=r"traffic\.output_tokens\.p95"):
        call_command("plan", str(path))
