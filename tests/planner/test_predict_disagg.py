"""`predict` rows with ``mode`` = ``disagg``: separate prefill and decode pools."""

import csv
import io

import numpy as np
import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db

HEADER = (
    "model,gpu,num_gpus,tp,pp,ep,weight_precision,kv_precision,isl,osl,concurrency,engine,mode,"
    "prefill_workers,prefill_tp,prefill_pp,prefill_ep,prefill_dp,"
    "decode_workers,decode_tp,decode_pp,decode_ep,decode_dp\n"
)


def predict(tmp_path, body: str, header: str = HEADER) -> list[dict]:
    source = tmp_path / "in.csv"
    source.write_text(header + body)
    out = tmp_path / "out.csv"
    call_command("predict", str(source), "-o", str(out), stderr=io.StringIO())
    return list(csv.DictReader(out.open()))


def test_disagg_rows_add_the_pool_columns_and_agg_rows_are_unchanged(catalog, tmp_path):
    body = (
        "Llama-3.1-70B,H100,4,4,1,1,bf16,,4096,512,16,vllm,,,,,,,,,,,\n"
        "Llama-3.1-70B,H100,,,,,bf16,,4096,512,16,vllm,disagg,2,4,1,1,1,1,4,1,1,1\n"
        "Llama-3.1-70B,H100,4,4,1,1,bf16,,4096,512,16,vllm,agg,2,4,1,1,1,1,4,1,1,1\n"
    )
    agg_only = predict(tmp_path, "Llama-3.1-70B,H100,4,4,1,1,bf16,,4096,512,16,vllm\n",
                       HEADER.split(",mode")[0] + "\n")  # fmt: skip
    rows = predict(tmp_path, body)
    assert list(rows[0])[-3:] == ["kv_transfer_ms", "prefill_gpus", "decode_gpus"]
    # a blank mode is today's answer, to the digit; 'agg' ignores the pool columns
    for key in ("total_output_tok_s", "ttft_ms", "tpot_ms"):
        assert rows[0][key] == agg_only[0][key] == rows[2][key]
    assert rows[0]["kv_transfer_ms"] == "" and rows[0]["prefill_gpus"] == ""
    # 2 prefill x TP4 + 1 decode x TP4 on one H100 node each pair: NVLink, 12 GPUs in all
    d = rows[1]
    assert d["fits"] == "true", d["reason"]
    assert (d["prefill_gpus"], d["decode_gpus"]) == ("8", "4")
    assert 0 < float(d["kv_transfer_ms"]) < 2  # 335.5 MB per GPU over NVLink
    assert float(d["output_tok_s_per_gpu"]) == pytest.approx(
        float(d["total_output_tok_s"]) / 12, rel=1e-5
    )
    # TPOT comes from decode-only steps: lower than the aggregated engine's at the same load
    assert float(d["tpot_ms"]) < float(rows[0]["tpot_ms"])


def test_an_amd_row_takes_its_engines_rocm_build_fit(catalog, tmp_path):
    from fleets.calibration import disagg_fits
    from sizing.disagg import fit_for

    # given the same SGLang deployment of DeepSeek-R1 on an AMD and on an NVIDIA GPU
    body = "".join(
        f"DeepSeek-R1-0528,{gpu},,,,,fp8,,8192,1024,1,sglang,disagg,1,8,1,8,1,1,8,1,8,1\n"
        for gpu in ("MI355X", "B200")
    )
    # when both are predicted
    amd, nvidia = predict(tmp_path, body)
    # then each names the engine build whose constants it took: the ROCm build's on AMD
    assert amd["fits"] == nvidia["fits"] == "true", (amd["reason"], nvidia["reason"])
    assert amd["profile"].endswith(" + disagg fit sglang-rocm"), amd["profile"]
    assert nvidia["profile"].endswith(" + disagg fit sglang"), nvidia["profile"]
    fits = disagg_fits()
    assert fit_for(fits, "sglang", "MI355X", "AMD").values != fits["sglang"].values


@pytest.mark.parametrize(
    ("cells", "fragment"),
    [
        ("disagg,2,,1,1,1,1,4,1,1,1", "prefill_tp is required"),
        ("disagg,2,4,1,1,1,,4,1,1,1", "decode_workers is required"),
        ("disagg,0,4,1,1,1,1,4,1,1,1", "prefill_workers must be a whole number from 1"),
        ("disagg,1,4,1,1,1,-1,4,1,1,1", "decode_workers must be a whole number from 1"),
        ("disagg,1,3,1,1,1,1,4,1,1,1", "prefill_tp: TP 3 does not divide"),
        ("disagg,1,4,1,1,1,1,4,1,2,1", "decode_ep: EP 2 on dense model"),
        ("split,1,4,1,1,1,1,4,1,1,1", "mode must be one of agg, disagg"),
    ],
)
def test_bad_disagg_rows_are_refused_naming_the_field(catalog, tmp_path, cells, fragment):
    body = f"Llama-3.1-70B,H100,,,,,bf16,,1024,128,8,vllm,{cells}\n"
    body += "Llama-3.1-70B,H100,,,,,bf16,,1024,128,8,vllm,disagg,1,4,1,1,1,1,4,1,1,1\n"
    rows = predict(tmp_path, body)
    assert rows[0]["fits"] == "false" and fragment in rows[0]["reason"], rows[0]["reason"]
    assert rows[1]["fits"] == "true"


def test_a_transfer_link_the_gpu_lacks_is_refused(catalog, tmp_path):
    header = HEADER.strip() + ",kv_link\n"
    body = (
        "Llama-3.1-70B,L40S,,,,,fp8,,1024,128,8,vllm,disagg,1,4,1,1,1,1,4,1,1,1,nvlink\n"
        "Llama-3.1-70B,H100,,,,,bf16,,1024,128,8,vllm,disagg,1,4,1,1,1,1,8,1,1,1,nvlink\n"
        "Llama-3.1-70B,H100,,,,,bf16,,1024,128,8,vllm,disagg,1,4,1,1,1,1,8,1,1,1,rdma\n"
        "Llama-3.1-70B,H100,,,,,bf16,,1024,128,8,vllm,disagg,1,4,1,1,1,1,8,1,1,1,pigeon\n"
    )
    rows = predict(tmp_path, body, header)
    assert rows[0]["reason"].startswith("kv_link: L40S has no NVLink")
    assert rows[1]["reason"].startswith("kv_link: nvlink needs a prefill and a decode worker")
    assert rows[2]["fits"] == "true"
    assert rows[3]["reason"].startswith("kv_link must be one of auto, nvlink, rdma")


def test_gb300_nvl72_transfer_stays_on_nvlink(catalog, tmp_path):
    # DeepSeek-R1 FP4 on GB300: 4 prefill TP4 workers and a 16-GPU attention-DP decode worker,
    # all inside one 72-GPU NVLink domain
    body = "DeepSeek-R1-0528,GB300,,,,,fp4,,1024,1024,512,trtllm,disagg,4,4,1,4,1,1,1,1,16,16\n"
    (row,) = predict(tmp_path, body)
    assert row["fits"] == "true", row["reason"]
    assert (row["prefill_gpus"], row["decode_gpus"]) == ("16", "16")
    assert float(row["kv_transfer_ms"]) < 0.5


def test_simulate_runs_the_two_pools(catalog, tmp_path):
    source = tmp_path / "in.csv"
    source.write_text(
        HEADER + "Llama-3.1-70B,H100,,,,,bf16,,4096,512,8,vllm,disagg,2,4,1,1,1,1,4,1,1,1\n"
    )
    out, sim = tmp_path / "out.csv", tmp_path / "sim.csv"
    call_command("predict", str(source), "-o", str(out), stderr=io.StringIO())
    call_command("predict", str(source), "-o", str(sim), "--simulate", stderr=io.StringIO())
    (analytic,), (simulated,) = csv.DictReader(out.open()), csv.DictReader(sim.open())
    assert simulated["fits"] == "true", simulated["reason"]
    # decode-only steps at the same batch: the TPOT medians agree closely
    assert float(simulated["tpot_ms"]) == pytest.approx(float(analytic["tpot_ms"]), rel=0.1)
    assert simulated["kv_transfer_ms"] == analytic["kv_transfer_ms"]


def test_a_pool_whose_ep_does_not_divide_the_experts_is_refused(catalog, tmp_path):
    body = "DeepSeek-R1-0528,GB200,,,,,fp4,,1024,1024,64,sglang,disagg,1,4,1,4,1,1,1,1,48,48\n"
    (row,) = predict(tmp_path, body)
    assert row["fits"] == "false"
    assert row["reason"].startswith("decode_ep: EP 48 does not divide"), row["reason"]


@pytest.mark.parametrize(
    ("column", "value"),
    [("embedding_precision", "fp8"), ("images_per_request,tokens_per_image", "2,196")],
)
def test_columns_the_pools_do_not_model_are_refused_not_ignored(catalog, tmp_path, column, value):
    # given a disagg row that also sets a column only the aggregated model reads
    header = HEADER.rstrip("\n") + f",{column}\n"
    body = "Llama-3.1-70B,H100,,,,,bf16,,1024,128,8,vllm,disagg,1,4,1,1,1,1,4,1,1,1," + value
    body += "\nLlama-3.1-70B,H100,,,,,bf16,,1024,128,8,vllm,disagg,1,4,1,1,1,1,4,1,1,1"
    body += "," * (column.count(",") + 1) + "\n"
    # when predicted, then that row is refused naming the column and the blank one is sized
    rows = predict(tmp_path, body, header)
    named = column.split(",")[0]
    assert rows[0]["fits"] == "false" and named in rows[0]["reason"], rows[0]["reason"]
    assert rows[1]["fits"] == "true"


def test_max_num_seqs_caps_each_decode_rank_and_the_clients_beyond_wait(catalog, tmp_path):
    # given 36 clients on 1 prefill + 1 decode TP4 worker of Llama 70B on H100
    header = HEADER.strip() + ",max_num_seqs\n"
    row = "Llama-3.1-70B,H100,,,,,bf16,,1024,512,36,vllm,disagg,1,4,1,1,1,1,4,1,1,1,{}\n"
    rows = predict(tmp_path, row.format(8) + row.format(64), header)
    slots, roomy = rows
    assert slots["fits"] == roomy["fits"] == "true"
    # when the decode rank runs at most 8 sequences, the other 28 clients wait for a slot:
    # TTFT grows several times, TPOT falls (a smaller batch steps faster), throughput falls
    assert float(slots["ttft_ms"]) > 5 * float(roomy["ttft_ms"])
    assert float(slots["tpot_ms"]) < float(roomy["tpot_ms"])
    assert float(slots["total_output_tok_s"]) < float(roomy["total_output_tok_s"])


def test_a_closed_loop_row_waits_by_the_wave_factor_its_calibration_used(catalog, tmp_path):
    # given DeepSeek-R1 fp8 on B200, one prefill worker of 8 attention-DP ranks and one TP8
    # decode worker under SGLang, 32 clients of 8,192 / 1,024 tokens
    from fleets.calibration import disagg_fits
    from planner.management.commands.predict import catalog_resolver, profile_for
    from planner.predict_io import POOL_FIELDS, parse_row
    from sizing.disagg import UNFITTED, fit_for, predict_disagg
    from sizing.disagg_sim import closed_loop_wait_factors

    cells = "DeepSeek-R1-0528,B200,,,,,fp8,,8192,1024,32,sglang,disagg,1,1,1,8,8,1,8,1,8,1"
    (row,) = predict(tmp_path, cells + "\n")
    assert row["fits"] == "true", row["reason"]
    # when the core predicts it with the factor the calibration gave its own points: the
    # two-pool simulator at the row's unfitted disaggregated constants
    parsed = parse_row(dict(zip(HEADER.strip().split(","), cells.split(","), strict=True)),
                       catalog_resolver())  # fmt: skip
    base = profile_for()(parsed)[0]
    fit = fit_for(disagg_fits(), parsed.engine, parsed.gpu.name, parsed.gpu.vendor)
    pools = {name: {k: getattr(getattr(parsed.disagg, name), k) for k in POOL_FIELDS}
             for name in ("prefill", "decode")}  # fmt: skip
    args = dict(models=parsed.model, gpus=parsed.gpu, weight_precision="fp8", kv_precision=None,
                isl=8192.0, osl=1024.0, concurrency=32.0, engine=parsed.engine_settings(),
                **pools)  # fmt: skip
    waves = closed_loop_wait_factors(**args, calibration=UNFITTED.calibrate(base))
    core = predict_disagg(**args, calibration=fit.calibrate(base),
                          prefill_wait_scale=fit.wait_scale, slot_wait_scale=fit.slot_wait_scale,
                          prefill_wait_factor=waves.factor)  # fmt: skip
    # then the door and the core agree (to the CSV's 2 decimals), and the factor is the
    # simulator's, not M/D/1's 1
    assert waves.simulated[0] and waves.factor[0] > 1.5
    assert float(row["ttft_ms"]) == pytest.approx(core.ttft_ms[0], abs=0.006)
    assert float(row["tpot_ms"]) == pytest.approx(core.tpot_ms[0], abs=0.006)


def test_a_row_run_as_a_published_recipe_takes_the_recipes_decode_batch(catalog, tmp_path):
    # given DeepSeek-R1 fp8 on GB300 under TensorRT-LLM as InferenceX launched it: one prefill
    # worker of 4 attention-DP ranks and four TP8 decode workers, 36 clients of 1k / 8k
    # tokens (the shipped recipe "ctx1_gen4_tep8_batch8": 8 sequences per decode rank)
    header = HEADER.strip() + ",max_num_seqs\n"
    row = "DeepSeek-R1-0528,GB300,,,,,fp8,,{},36,trtllm,disagg,1,1,1,4,4,4,8,1,8,1,{}\n"
    # when predicted with its lengths nominal, as their drawn mean (0.9 x), with the recipe's
    # batch stated, and with a batch of the user's own
    nominal, drawn, stated, own = predict(
        tmp_path,
        row.format("1024,8192", "") + row.format("922,7373", "") + row.format("1024,8192", 8)
        + row.format("1024,8192", 64),
        header,
    )  # fmt: skip
    # then the blank setting takes the recipe's batch, says so, and answers as if stated
    assert "launch recipe: decode max batch 8 per rank" in nominal["profile"]
    assert "launch recipe" in drawn["profile"] and "launch recipe" not in stated["profile"]
    for key in ("ttft_ms", "tpot_ms", "total_output_tok_s"):
        assert nominal[key] == stated[key]
    # 32 slots for 36 clients: four wait for a slot, seconds against a roomy decode pool
    assert float(nominal["ttft_ms"]) > 5 * float(own["ttft_ms"])
    assert "launch recipe" not in own["profile"]
    # and the same deployment with MTP matches no recipe (the shipped ones are not speculative)
    (mtp,) = predict(tmp_path, row.format("1024,8192", "")[:-1] + ",mtp,1,0.8\n",
                     header.strip() + ",spec_method,spec_tokens,spec_acceptance\n")  # fmt: skip
    assert mtp["fits"] == "true" and "launch recipe" not in mtp["profile"]


def test_the_report_scores_predict_on_its_rows_as_its_points_predict_them(catalog):
    # given the measured GB300 FP8 1k/8k TensorRT-LLM rows at 36 clients (recipe
    # "ctx1_gen4_tep8_batch8": 32 decode slots), as the disaggregated report reads them
    import importlib.util
    from pathlib import Path

    from fleets.calibration import disagg_fits
    from sizing.disagg import predict_points

    path = Path(__file__).resolve().parents[2] / "scripts" / "disagg_report.py"
    spec = importlib.util.spec_from_file_location("disagg_report", path)
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    points, _ = report.disagg_points({"c3635", "c3638", "c3645"})
    assert [p.metric for p in points] == ["ttft_ms", "tpot_ms", "output_tok_s_per_gpu"]
    assert points[0].decode_max_batch == 8 and points[0].prefill_wait_factor == 1.0
    # when its door writes them as a predict CSV, with and without the launch recipes
    door = report.door_predictions(points)
    bare = report.door_predictions(points, launch=False)
    # then predict answers as the report's points (its lengths whole tokens: within 1 %)
    assert door == pytest.approx(predict_points(points, disagg_fits()), rel=0.01)
    # and without the recipe the four clients beyond the slots never wait: TTFT far lower
    assert bare[0] < door[0] / 5 and all(np.isfinite(bare))
