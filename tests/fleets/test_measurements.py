"""Measurement rows: reading, normalising, plain-fit filtering, folds, uploads, catalog names.

Pure module: no database is touched.
"""

import csv
import dataclasses
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from fleets import measurements as m
from sizing.calibrate import _layout

DATA = Path(__file__).parent / "data"

VALID = {
    "source": "our lab",
    "source_date_or_version": "2026-03-01",
    "model": "Llama-3.1-8B",
    "gpu": "H100",
    "num_gpus": "4",
    "tp": "4",
    "pp": "1",
    "ep": "",
    "engine": "vLLM 0.11",
    "weight_precision": "FP8",
    "kv_precision": "",
    "isl": "1024",
    "osl": "128",
    "concurrency_or_rate": "concurrency=16",
    "metric": "total_output_tok_s",
    "value": "23406",
    "notes": "",
}


def _csv_text(*changes: dict) -> str:
    """A measured.csv-format file with one VALID row per change dict (applied on top)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=m.COLUMNS)
    writer.writeheader()
    for change in changes:
        writer.writerow({**VALID, **change})
    return buffer.getvalue()


def _read(*changes: dict) -> list[m.Measurement]:
    return m.read_measurements(io.StringIO(_csv_text(*changes)))


@pytest.fixture(scope="module")
def shipped():
    """Both shipped files read non-strictly, keyed by file."""
    return {path.name: m.read_measurements(path, strict=False) for path in m.SHIPPED_FILES}


@pytest.fixture(scope="module")
def shipped_by_id(shipped):
    return {row.row_id: row for rows, _ in shipped.values() for row in rows}


# ---------------------------------------------------------------- one valid row


def test_valid_row_is_normalised():
    # given one row with FP8 weights, blank KV precision and a total throughput
    (row,) = _read({})
    # then conditions are parsed and normalised
    assert (row.model, row.gpu, row.num_gpus, row.tp, row.pp, row.ep) == (
        "Llama-3.1-8B",
        "H100",
        4,
        4,
        1,
        None,
    )
    assert (row.isl, row.osl, row.concurrency, row.request_rate) == (1024, 128, 16, None)
    assert row.engine_family == "vllm"
    assert (row.weight_precision, row.kv_precision) == ("fp8", "fp8")
    assert "kv_precision_assumed" in row.flags
    assert row.line == 2 and row.row_id == "line:2"


def test_total_output_is_divided_by_gpus_hand_computed():
    # given 23,406 output tok/s in total over a 4-GPU instance
    (row,) = _read({"value": "23406", "num_gpus": "4"})
    # then the per-GPU value is 23406 / 4 = 5851.5, and the published number is kept
    assert row.metric == "output_tok_s_per_gpu"
    assert row.value == pytest.approx(5851.5)
    assert row.raw_value == 23406 and row.raw_metric == "total_output_tok_s"
    assert "converted_from_total" in row.flags


def test_shipped_total_row_converts_to_per_gpu(shipped_by_id):
    # given the v1.0 perf-overview row: Llama-3.3-70B FP8, H100 TP2, 128/128, total 6378 tok/s
    row = shipped_by_id["m0152"]
    assert (row.model, row.gpu, row.num_gpus, row.raw_value) == ("Llama-3.3-70B", "H100", 2, 6378)
    # then per GPU it is 6378 / 2 = 3189
    assert row.value == pytest.approx(3189.0)
    assert row.offline and row.concurrency is None


def test_converted_total_agrees_with_published_per_gpu(shipped_by_id):
    # given the DeepSeek-R1 B200 max-throughput run, published both ways
    total, per_gpu = shipped_by_id["m1226"], shipped_by_id["m1227"]
    # then 43146.2042 / 8 GPUs equals the published 5393.2755 per GPU
    assert total.value == pytest.approx(per_gpu.value, abs=1e-3)


@pytest.mark.parametrize(
    ("cell", "concurrency", "rate", "flag"),
    [
        ("concurrency=8", 8, None, None),
        ("concurrency 7168 (114688 requests), max_batch_size 896", 7168, None, None),
        ("static batch size 64", 64, None, "static_batch"),
        ("QPS 2", None, 2.0, "open_loop_rate"),
        ("Server, target_qps 39.6", None, 39.6, "open_loop_rate"),
        ("offline max throughput (all requests queued)", None, None, "offline"),
        ("QPS INF (all requests at once)", None, None, "offline"),
        ("Offline", None, None, "offline"),
    ],
)
def test_load_cells_are_parsed(cell, concurrency, rate, flag):
    (row,) = _read({"concurrency_or_rate": cell})
    assert (row.concurrency, row.request_rate) == (concurrency, rate)
    assert flag is None or flag in row.flags


@pytest.mark.parametrize(
    ("raw", "metric", "statistic", "flags"),
    [
        ("ttft_ms_median", "ttft_ms", "median", set()),
        ("ttft_ms_mean", "ttft_ms", "mean", {"mean_not_median"}),
        ("itl_ms_mean", "tpot_ms", "mean", {"itl_as_tpot", "mean_not_median"}),
        ("tpot_ms_p99", "tpot_ms_p99", "p99", set()),
        ("total_tok_s_per_gpu", "total_tok_s_per_gpu", "as_reported", set()),
    ],
)
def test_metrics_map_to_normalised_names(raw, metric, statistic, flags):
    (row,) = _read({"metric": raw, "value": "12.5"})
    assert (row.metric, row.statistic) == (metric, statistic)
    assert flags <= row.flags
    assert row.value == 12.5  # only total throughputs are divided


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("FP4 (NVFP4, nvidia/DeepSeek-R1-0528-FP4*)", "fp4"),
        ("MXFP4 (amd/Kimi-K2.5-MXFP4)", "fp4"),
        ("FP8 (nvidia/Llama-3.1-70B-Instruct-FP8)", "fp8"),
        ("INT4 (moonshotai/Kimi-K2.5 native INT4)", "int4"),
        ("BF16 (zai-org/GLM-4.7)", "bf16"),
        ("FP16/BF16 (default, per section title)", "bf16"),
        ("auto (per doc comment for Hopper)", ""),
        ("", ""),
        ("Q5_K_M", None),
    ],
)
def test_precisions_are_normalised(text, expected):
    assert m.normalize_precision(text) == expected


@pytest.mark.parametrize(
    ("weights", "kv"), [("fp8", "fp8"), ("fp4", "fp8"), ("bf16", "bf16"), ("int4", "bf16")]
)
def test_blank_kv_precision_follows_the_weights(weights, kv):
    assert m.default_kv_precision(weights) == kv


@pytest.mark.parametrize(
    ("engine", "family"),
    [
        ("NVIDIA Dynamo + vLLM 0.18.0 (disaggregated prefill/decode)", "vllm"),
        ("vLLM (trtllm-gen modular FP8 MoE, PR #36307)", "vllm"),
        ("SGLang + MoRI (AMD disaggregated prefill/decode)", "sglang"),
        ("NVIDIA NIM 1.8.0 (TensorRT-LLM backend), measured with AIPerf", "trtllm"),
        ("TensorRT-LLM (NVIDIA MLPerf harness)", "trtllm"),
        ("ATOM (AMD ROCm engine)", "other"),
    ],
)
def test_engine_families(engine, family):
    assert m.engine_family(engine) == family


# ---------------------------------------------------------------- refused input


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"metric": "tokens_per_minute"}, "metric", "unknown metric"),
        ({"gpu": ""}, "gpu", "missing"),
        ({"model": " "}, "model", "missing"),
        ({"isl": ""}, "isl", "missing"),
        ({"osl": ""}, "osl", "missing"),
        ({"concurrency_or_rate": ""}, "concurrency_or_rate", "missing"),
        ({"concurrency_or_rate": "light load"}, "concurrency_or_rate", "not a concurrency"),
        ({"value": "fast"}, "value", "not a number"),
        ({"value": "-3"}, "value", "positive"),
        ({"isl": "1k"}, "isl", "not a number"),
        ({"num_gpus": ""}, "num_gpus", "missing"),  # a total cannot be made per GPU
        ({"weight_precision": "Q5_K_M"}, "weight_precision", "unknown precision"),
    ],
)
def test_bad_row_is_refused_naming_line_and_field(change, field, words):
    # given a valid first row and a bad second row (line 3 of the file)
    text = _csv_text({}, change)
    # when read strictly, then nothing is returned and the error names line 3 and the field
    with pytest.raises(m.MeasurementError) as caught:
        m.read_measurements(io.StringIO(text))
    error = caught.value
    assert (error.line, error.field) == (3, field)
    assert "line 3" in str(error) and repr(field) in str(error) and words in str(error)


def test_every_bad_row_is_listed_and_nothing_partial_is_returned():
    text = _csv_text({"metric": "bogus"}, {}, {"value": "n/a"})
    with pytest.raises(m.MeasurementError) as caught:
        m.read_measurements(io.StringIO(text))
    error = caught.value
    assert (error.line, error.field) == (2, "metric")
    assert [(p.line, p.field) for p in error.problems] == [(2, "metric"), (4, "value")]
    assert "line 4, field 'value'" in str(error)


def test_non_strict_mode_returns_rows_and_skipped_reasons():
    text = _csv_text({}, {"isl": ""})
    rows, skipped = m.read_measurements(io.StringIO(text), strict=False)
    assert len(rows) == 1
    assert skipped == [m.SkippedRow(3, "line:3", "isl", "missing")]


def test_header_without_a_condition_column_is_refused():
    text = "model,gpu,isl,osl,metric,value\nLlama-3.1-8B,H100,1,1,ttft_ms_median,5\n"
    with pytest.raises(m.MeasurementError) as caught:
        m.read_measurements(io.StringIO(text))
    assert (caught.value.line, caught.value.field) == (1, "concurrency_or_rate")


def test_uploaded_bytes_with_bom_are_read():
    upload = io.BytesIO(b"\xef\xbb\xbf" + _csv_text({}).encode())
    assert len(m.read_measurements(upload)) == 1


# ---------------------------------------------------------------- shipped files


def test_shipped_files_keep_the_reference_columns_first():
    for path in m.SHIPPED_FILES:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            assert tuple(reader.fieldnames) == m.COLUMNS + m.EXTRA_COLUMNS
            rows = list(reader)
        assert all(row["source"] for row in rows)
        assert len({row["row_id"] for row in rows}) == len(rows)


def test_shipped_row_counts(shipped):
    # measured.csv: 1,244 rows; 34 state no ISL or OSL (MLPerf variable-length sets, blog prose)
    rows, skipped = shipped["measured.csv"]
    assert (len(rows), len(skipped)) == (1210, 34)
    assert Counter(entry.field for entry in skipped) == {"isl": 31, "osl": 3}
    # measured-concurrency.csv: 10,089 rows; the 10 of a GPUStack block served with AWQ
    # weights (no bit width given) have no precision the model knows
    rows, skipped = shipped["measured-concurrency.csv"]
    assert (len(rows), len(skipped)) == (10079, 10)
    assert Counter(entry.field for entry in skipped) == {"weight_precision": 10}


def test_plain_fit_exclusions_on_measured_csv(shipped):
    rows, _ = shipped["measured.csv"]
    kept, excluded = m.plain_fit_rows(rows)
    assert len(kept) == 1186
    assert Counter(reason for _, reason in excluded) == {
        m.EXCLUDE_SPECULATIVE: 4,  # DeepSeek-R1 min-latency MTP runs (B200, H200)
        m.EXCLUDE_OTHER_STATISTIC: 3,  # totals published next to per-GPU values
        m.EXCLUDE_TYPO: 1,  # H200 llama_70b 2048/128 BS 32
        m.EXCLUDE_MISCONFIGURED: 1,  # TensorRT-LLM issue #6294's first H100 PCIe run
        m.EXCLUDE_LAYOUT_UNSTATED: 3,  # Falcon-180B blog's 8x H200 Llama-2-70B "max TP/PP/DP"
        m.EXCLUDE_SATURATED: 12,  # 70B TP4 at 32 req/s, 467-token prompts, H100 and H200
    }
    assert Counter(row.metric for row in kept) == {
        "output_tok_s_per_gpu": 1021,
        "ttft_ms": 85,
        "tpot_ms": 77,
        "tok_s_per_user": 3,
    }


def test_a_misconfigured_run_yields_to_the_run_its_own_source_kept(shipped_by_id):
    # given the support thread's two H100 PCIe runs of Llama-3.1-8B FP8 at 128/128
    first, maintainer = shipped_by_id["m1241"], shipped_by_id["m1244"]
    # then the user's first run (CUDA graphs for batch 128 only) is left out, named so
    assert "misconfigured" in first.flags
    assert m.exclusion_reason(first) == m.EXCLUDE_MISCONFIGURED
    # and the maintainer's 17,500 tok/s of the same benchmark is fitted
    assert m.exclusion_reason(maintainer) == ""
    assert (maintainer.value, maintainer.isl, maintainer.osl) == (17500.0, 128, 128)
    assert (maintainer.gpu, maintainer.model) == (first.gpu, first.model)


def test_a_multi_gpu_run_without_its_layout_is_left_out(shipped_by_id):
    # given the Falcon-180B blog's Llama-2-70B on one and on eight H200s (8 GPUs in its
    # "max TP/PP/DP config", split not stated) at 128/128: the same 3,803 tok/s per GPU
    one, eight = shipped_by_id["m1160"], shipped_by_id["m1161"]
    assert one.value == eight.value == 3803.0
    # then the one-GPU run is fitted and the eight-GPU one is left out, named so (read as TP8
    # it would be predicted at a third of its value; as eight TP1 copies, exactly the other)
    assert m.exclusion_reason(one) == ""
    assert (eight.num_gpus, eight.tp) == (8, None)
    assert m.exclusion_reason(eight) == m.EXCLUDE_LAYOUT_UNSTATED
    # and a stated layout, or an attention-DP one the notes give, is not
    assert m.exclusion_reason(dataclasses.replace(eight, tp=8)) == ""
    dep = dataclasses.replace(eight, flags=eight.flags | {"attention_dp"})
    assert m.exclusion_reason(dep) == ""


def test_an_open_loop_run_above_saturation_is_left_out_at_that_rate_only(shipped):
    # given the TensorRT-LLM 0.14 serving table: 70B TP4 on H100, 467/256 tokens, 2-32 req/s
    rows, _ = shipped["measured.csv"]
    kept, excluded = m.plain_fit_rows(rows)
    run = [
        row for row in rows
        if row.model == "Llama-3.1-70B" and row.gpu == "H100" and row.request_rate
        and (row.isl, row.osl) == (467, 256) and row.metric == "ttft_ms"
    ]  # fmt: skip
    ttft = {row.request_rate: row.value for row in run}
    assert ttft == {2.0: 62, 4.0: 68, 8.0: 92, 16.0: 175, 32.0: 1229}
    # then only 32 req/s (1,229 ms, 19.8x the 62 ms at 2 req/s) is left out, with all its
    # metrics; 16 req/s (2.8x) is kept
    saturated = {row.row_id for row, reason in excluded if reason == m.EXCLUDE_SATURATED}
    assert {"m0890", "m0891", "m0892"} <= saturated
    kept_rates = {row.request_rate for row in kept if row in run}
    assert kept_rates == {2.0, 4.0, 8.0, 16.0}


def test_plain_fit_exclusions_on_measured_concurrency_csv(shipped):
    rows, _ = shipped["measured-concurrency.csv"]
    kept, excluded = m.plain_fit_rows(rows)
    assert len(kept) == 1668
    assert Counter(reason for _, reason in excluded) == {
        m.EXCLUDE_DISAGGREGATED: 3057,
        m.EXCLUDE_SPECULATIVE: 1686,
        m.EXCLUDE_OFFLINE_BURST: 1210,
        m.EXCLUDE_OTHER_STATISTIC: 929,
        m.EXCLUDE_NOT_PREDICTED: 713,
        m.EXCLUDE_DERIVED: 352,
        m.EXCLUDE_OLDER_RUN: 264,
        m.EXCLUDE_ITL_PER_CHUNK: 80,
        m.EXCLUDE_OSL_NOT_FIXED: 80,
        m.EXCLUDE_OTHER_LAUNCH: 40,
    }
    assert Counter(row.metric for row in kept) == {
        "tpot_ms": 427,
        "ttft_ms": 311,
        "ttft_ms_p99": 311,
        "tpot_ms_p99": 311,
        "output_tok_s_per_gpu": 308,
    }
    # GPUStack's closed-loop runs stay: 11 conditions x (TTFT, TPOT, throughput, two p99s)
    gpustack = [row for row in kept if row.source.startswith("gpustack/gpustack:")]
    assert len(gpustack) == 55
    assert all(row.concurrency for row in gpustack)


def test_disaggregated_and_speculative_rows_match_the_notes(shipped):
    rows, _ = shipped["measured-concurrency.csv"]
    # the notes' per-engine table: 3,057 rows disaggregated; 2,808 rows run MTP/EAGLE, and
    # GPUStack's EAGLE3 and MTP blocks 150 more
    assert sum(row.disaggregated for row in rows) == 3057
    assert sum(row.speculative for row in rows) == 2808 + 150
    # and the flags agree with the engine column alone (InferenceX names MTP there; GPUStack
    # names the launch flag)
    assert all(
        row.speculative == ("MTP" in row.engine or "--speculative" in row.engine) for row in rows
    )


def test_negated_phrases_do_not_flag(shipped_by_id):
    # "no MTP" in the notes of the B200 max-throughput run
    assert not shipped_by_id["m1227"].speculative
    # MTP from the notes when the engine column does not say it
    assert shipped_by_id["m1224"].speculative
    # "non disaggregated ... GPU pool" in a blog table title
    assert not shipped_by_id["c7164"].disaggregated


def test_an_offline_burst_of_few_or_drawn_length_requests_is_left_out():
    # given three offline serving-benchmark runs: 500 fixed-length requests, 5,000 of them,
    # and a ShareGPT burst; and a closed-loop ShareGPT run
    offline = "offline (request rate inf, all requests at once)"
    rows = _read(
        {"concurrency_or_rate": offline, "notes": "dataset random (500 requests)"},
        {"concurrency_or_rate": offline, "notes": "dataset random (5000 requests)"},
        {"concurrency_or_rate": offline, "notes": "dataset ShareGPT (--num-prompts 2000)"},
        {"concurrency_or_rate": "concurrency=4", "notes": "dataset ShareGPT (100 requests)"},
    )
    # then the few-request and the drawn-length bursts are left out, the rest kept
    reasons = [m.exclusion_reason(row) for row in rows]
    assert reasons == [m.EXCLUDE_OFFLINE_BURST, "", m.EXCLUDE_OFFLINE_BURST, ""]


def test_a_tuned_launch_repeating_a_point_yields_to_the_first():
    # given one source's default launch and a tuned one of the same engine, same condition
    default, tuned = _read(
        {"engine": "SGLang v0.5.3"},
        {"engine": "SGLang v0.5.3 (--attention-backend triton)", "value": "9999"},
    )
    # then the first block is kept and the tuned one is named as another launch
    kept, excluded = m.plain_fit_rows([default, tuned])
    assert kept == [default]
    assert excluded == [m.Excluded(tuned, m.EXCLUDE_OTHER_LAUNCH)]


def test_exclude_reason_column_matches_the_code(shipped):
    # given the shipped exclude_reason column, when the rules are re-applied, they agree
    for path in m.SHIPPED_FILES:
        rows, skipped = shipped[path.name]
        expected = {entry.row_id: f"unreadable: {entry.field} {entry.reason}" for entry in skipped}
        expected |= {row.row_id: reason for row, reason in m.plain_fit_rows(rows)[1]}
        with open(path, newline="", encoding="utf-8") as handle:
            column = {row["row_id"]: row["exclude_reason"] for row in csv.DictReader(handle)}
        assert column == {row_id: expected.get(row_id, "") for row_id in column}


def test_only_overlapping_captures_lose_their_older_run(shipped):
    # given the two InferenceX API captures and blog posts comparing software versions
    rows, _ = shipped["measured-concurrency.csv"]
    kept, excluded = m.plain_fit_rows(rows)
    older = [row for row, reason in excluded if reason == m.EXCLUDE_OLDER_RUN]
    # then only the older capture loses rows, and the blog's SGLang 0.5.5 baseline stays
    assert {row.source_group for row in older} == {"InferenceX API capture"}
    assert all(row.run_date < "2026-06-14" for row in older)
    blog = "InferenceX blog sglang-0-5-6-b200-deepseek-r1-fp4-up-to-1-8x"
    assert len({row.run_date for row in kept if row.source_group == blog}) == 2


# ---------------------------------------------------------------- folds


def test_split_by_groups_kept_rows(shipped):
    rows = [row for rows, _ in shipped.values() for row in rows]
    kept, _ = m.plain_fit_rows(rows)
    families = m.split_by(kept, "model_family")
    assert {"llama-3", "llama-2", "deepseek", "qwen3", "mixtral", "gpt-oss"} <= set(families)
    assert sum(len(group) for group in families.values()) == len(kept)
    sources = m.split_by(kept, "source")
    assert len(sources["InferenceX API capture"]) > 0
    assert "MLPerf Inference v4.1 (NVIDIA)" not in sources  # no lengths: never kept
    assert set(m.split_by(kept, "gpu")) >= {"h100", "h200", "b200", "l40s", "mi355x"}


def test_leave_one_group_out_partitions_rows():
    rows = _read({}, {"gpu": "H200"}, {"gpu": "B200"})
    folds = list(m.leave_one_group_out(rows, "gpu"))
    assert [name for name, _, _ in folds] == ["h100", "h200", "b200"]
    for _, train, test in folds:
        assert len(train) + len(test) == 3 and not set(map(id, train)) & set(map(id, test))


def test_unknown_split_key_is_refused():
    with pytest.raises(ValueError, match="unknown split key"):
        m.split_by([], "colour")


# ---------------------------------------------------------------- catalog names


def _shipped_names(column: str) -> Counter:
    names = Counter()
    for path in m.SHIPPED_FILES:
        with open(path, newline="", encoding="utf-8") as handle:
            names.update(row[column] for row in csv.DictReader(handle))
    return names


def test_every_shipped_gpu_resolves_or_is_listed():
    catalog = m.catalog_names()
    gpus = _shipped_names("gpu")
    unresolved = {name for name in gpus if catalog.gpu_slug(name) is None}
    assert unresolved == set(m.UNCATALOGUED_GPUS)
    # 15 names (GPUStack's "H100", "H200", "A100" among them): 14 resolve (GB300's 618 rows
    # among them); Gaudi 3 (88) is not in the catalog
    assert (len(gpus), sum(gpus[name] for name in unresolved)) == (15, 88)
    assert catalog.gpu_slug("H100 PCIe") == "h100_pcie" and catalog.gpu_slug("H100") == "h100_sxm"


def test_every_shipped_model_resolves_or_is_listed():
    catalog = m.catalog_names()
    models = _shipped_names("model")
    unresolved = {name for name in models if catalog.model_slug(name) is None}
    assert unresolved == set(m.UNCATALOGUED_MODELS)
    # 30 names (GPUStack's Qwen3-8B/32B/235B-A22B and gpt-oss-20b among the new): 27
    # resolve (Llama 2 7B/13B/70B with their 45 rows among them); 3 are not in the catalog
    # (161 rows)
    assert (len(models), sum(models[name] for name in unresolved)) == (30, 161)
    assert catalog.model_slug("Llama-2-70B") == "llama-2-70b"
    assert catalog.model_slug("DeepSeek-R1-0528") == "deepseek-r1"
    assert catalog.model_slug("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"


def test_name_normalisation_is_the_planners():
    from fleets import names, selectors

    assert m.normalize_name is names.normalize_name  # one implementation, fleets.names
    assert selectors.normalize_name is names.normalize_name
    assert m.normalize_name("meta-llama/Meta-Llama-3.1-70B-Instruct") == "llama-3.1-70b"


# ---------------------------------------------------------------- uploads


def _json(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def test_vllm_result_json_becomes_measurements():
    # given a vllm bench serve result: 160 prompts of 1024 in / 128 out, 16 in flight, 2 GPUs
    data = _json("vllm_bench_serve_llama8b_h100_c16.json")
    rows = m.parse_vllm_benchmark_json(data, gpu="H100", num_gpus=2, tp=2, weight_precision="bf16")
    by_metric = {row.raw_metric: row for row in rows}
    # then output_throughput 1638.4 tok/s over 2 GPUs is 819.2 per GPU
    assert by_metric["total_output_tok_s"].value == pytest.approx(819.2)
    assert by_metric["ttft_ms_median"].value == 48.2
    assert by_metric["tpot_ms_p99"].value == 10.75
    assert len(rows) == 10  # throughput + mean/median/p99 of TTFT, TPOT and ITL
    row = by_metric["tpot_ms_median"]
    # and the conditions come from the JSON (lengths are per-request means) and the arguments
    assert (row.model, row.isl, row.osl, row.concurrency, row.request_rate) == (
        "meta-llama/Llama-3.1-8B-Instruct",
        1024,
        128,
        16,
        None,
    )
    assert "mean_lengths" in row.flags and not row.offline
    assert (row.engine_family, row.kv_precision) == ("vllm", "bf16")


def test_vllm_result_json_missing_field_is_named():
    data = _json("vllm_bench_serve_llama8b_h100_c16.json")
    del data["median_ttft_ms"]
    with pytest.raises(m.MeasurementError) as caught:
        m.parse_vllm_benchmark_json(data, gpu="H100", num_gpus=1, tp=1)
    assert caught.value.field == "median_ttft_ms" and "median_ttft_ms" in str(caught.value)


def test_vllm_result_json_needs_a_gpu():
    data = _json("vllm_bench_serve_llama8b_h100_c16.json")
    with pytest.raises(m.MeasurementError) as caught:
        m.parse_vllm_benchmark_json(data, gpu="", num_gpus=1, tp=1)
    assert caught.value.field == "gpu"


def test_guidellm_report_becomes_measurements():
    # given a guidellm report with a synchronous and an 8-stream benchmark on one L40S
    data = _json("guidellm_llama8b_l40s.json")
    rows = m.parse_guidellm_report(data, gpu="L40S", model="Llama-3.1-8B", num_gpus=1, tp=1)
    points = m.split_by(rows, lambda row: str(row.concurrency))
    assert set(points) == {"1", "8"}
    tpot = {row.concurrency: row.value for row in rows if row.raw_metric == "tpot_ms_median"}
    # then TPOT is guidellm's inter-token latency (time_per_output_token_ms includes TTFT)
    assert tpot == {1: 22.4, 8: 25.1}
    throughput = [row for row in points["8"] if row.metric == "output_tok_s_per_gpu"]
    assert [row.value for row in throughput] == [311.0]
    assert {(row.isl, row.osl) for row in rows} == {(1024, 256)}
    assert len(rows) == 14  # per point: throughput + mean/median/p99 of TTFT and TPOT


def test_guidellm_report_missing_field_is_named():
    data = _json("guidellm_llama8b_l40s.json")
    del data["benchmarks"][1]["metrics"]["time_to_first_token_ms"]
    with pytest.raises(m.MeasurementError) as caught:
        m.parse_guidellm_report(data, gpu="L40S", model="Llama-3.1-8B", num_gpus=1, tp=1)
    assert caught.value.field == "benchmarks[1].metrics.time_to_first_token_ms.successful"


def test_guidellm_report_without_strategy_is_refused():
    data = _json("guidellm_llama8b_l40s.json")
    del data["benchmarks"][0]["config"]
    with pytest.raises(m.MeasurementError) as caught:
        m.parse_guidellm_report(data, gpu="L40S", model="Llama-3.1-8B", num_gpus=1, tp=1)
    assert caught.value.field == "benchmarks[0].config.strategy"


# ---------------------------------------------------------------- disaggregated layouts


def test_disaggregated_layout_reads_the_pools_from_the_notes():
    notes = (
        "method A; disaggregated multinode: prefill 22 GPUs (11 worker(s), TP2 EP2, "
        "DP-attention), decode 8 GPUs (2 worker(s), TP4 EP1); tp/ep columns = decode worker"
    )
    layout = m.disaggregated_layout(notes)
    # DP-attention: each GPU is an attention rank (TP1 x DP2), experts over the worker
    assert layout["prefill"] == {"workers": 11, "pp": 1, "tp": 1, "dp": 2, "ep": 2}
    # plain TP: 8 GPUs / 2 workers = TP4, EP as stated
    assert layout["decode"] == {"workers": 2, "pp": 1, "tp": 4, "dp": 1, "ep": 1}
    assert m.disaggregated_layout("single node, TP8") is None


def test_every_shipped_disaggregated_api_row_states_its_pools():
    rows, _ = m.read_shipped_measurements()
    disagg = [r for r in rows if r.disaggregated]
    stated = [r for r in disagg if m.disaggregated_layout(r.notes)]
    # the blog tables (Kimi-K2.5, DeepSeek-V4-Pro, the DeepSeek-R1 GB200-vs-B200 post) do not
    assert len(disagg) - len(stated) == 117
    for r in stated:
        layout = m.disaggregated_layout(r.notes)
        assert r.num_gpus == sum(
            p["workers"] * p["tp"] * p["pp"] * p["dp"] for p in layout.values()
        )


# ---------------------------------------------------------------- disaggregated recipes
RECIPE_HEADER = (
    "config_key,framework,precision,gpu,image,isl,osl,spec_decoding,prefill_workers,prefill_tp,"
    "prefill_ep,prefill_dp_attn,decode_workers,decode_tp,decode_ep,decode_dp_attn,"
    "decode_batch_per_rank,conc_list,config_file,source_commit\n"
)


def _recipes(tmp_path, *rows):
    path = tmp_path / "recipes.csv"
    path.write_text(RECIPE_HEADER + "".join(r + "\n" for r in rows))
    return m.recipe_decode_batches(path)


def test_a_recipe_gives_the_decode_batch_of_its_pools_and_concurrencies(tmp_path):
    # given the GB300 FP8 1k/8k entry "ctx1_gen4_tep8_batch8" run at 4 and 36 clients
    batches = _recipes(
        tmp_path,
        "k,dynamo-trt,fp8,gb300,img,1024,8192,none,1,4,4,true,4,8,8,false,8,4 36,"
        "recipes/ctx1_gen4_tep8_batch8_eplb0_mtp0.yaml,abc",
        "k,dynamo-trt,fp8,gb300,img,1024,8192,mtp,1,4,4,true,4,8,8,false,1,36,mtp.yaml,abc",
    )
    # and the measured row's pools as the notes read them (prefill DP-attention over 4 GPUs)
    layout = m.disaggregated_layout(
        "prefill 4 GPUs (1 worker(s), TP4 EP4, DP-attention), decode 32 GPUs (4 worker(s), TP8 EP8)"
    )
    # then the non-speculative entry's batch applies at a listed concurrency only
    args = ("trtllm", "gb300", "fp8", 1024, 8192, layout)
    assert m.recipe_value(batches, *args, 36) == 8
    assert m.recipe_value(batches, *args, 4) == 8
    assert m.recipe_value(batches, *args, 64) == 0
    # another GPU, engine or length: no entry
    assert m.recipe_value(batches, "sglang", "gb300", "fp8", 1024, 8192, layout, 36) == 0
    assert m.recipe_value(batches, "trtllm", "gb200", "fp8", 1024, 8192, layout, 36) == 0


def test_recipes_that_disagree_or_name_no_batch_give_none(tmp_path):
    batches = _recipes(
        tmp_path,
        "k,dynamo-trt,fp8,h100,img,1024,1024,none,1,8,8,false,2,8,8,false,16,64,a.yaml,abc",
        "k,dynamo-trt,fp8,h100,img,1024,1024,none,1,8,8,false,2,8,8,false,32,64,b.yaml,def",
        "k,dynamo-sglang,fp8,h100,img,1024,1024,none,1,8,8,false,2,8,8,false,,64,,abc",
    )
    tp8 = {"workers": 1, "tp": 8, "pp": 1, "ep": 8, "dp": 1}
    layout = {"prefill": tp8, "decode": {**tp8, "workers": 2}}
    # two versions of the entry say 16 and 32: the row keeps the engine default
    assert m.recipe_value(batches, "trtllm", "h100_sxm", "fp8", 1024, 1024, layout, 64) == 0
    assert m.recipe_value(batches, "sglang", "h100_sxm", "fp8", 1024, 1024, layout, 64) == 0


def test_a_deployment_stated_as_predict_states_it_finds_its_launch_recipe(tmp_path):
    # given the GB300 FP8 1k/8k entry "ctx1_gen4_tep8_batch8" run at 4 and 36 clients
    batches = _recipes(
        tmp_path,
        "k,dynamo-trt,fp8,gb300,img,1024,8192,none,1,4,4,true,4,8,8,false,8,4 36,"
        "recipes/ctx1_gen4_tep8_batch8_eplb0_mtp0.yaml,abc",
    )
    values = (batches, {})
    # and its pools as a predict row gives them: GPUs per worker tp x pp, attention-DP ranks
    pools = {
        "prefill": {"workers": 1, "tp": 1, "dp": 4},
        "decode": {"workers": 4, "tp": 8, "dp": 1},
    }

    def found(isl, osl, clients, family="trtllm"):
        return m.launch_settings(family, "gb300", "fp8", isl, osl, pools, clients, values)

    # then the nominal lengths and their drawn mean (0.9 x nominal, to the token) both match
    assert found(1024, 8192, 36) == m.LaunchSettings(decode_max_batch=8)
    assert found(922, 7373, 36) == found(921, 7372, 36) == m.LaunchSettings(decode_max_batch=8)
    assert found(1024, 8192, 36).label() == "launch recipe: decode max batch 8 per rank"
    # other lengths, another concurrency, a blank or fractional one, another engine: none
    for miss in (found(900, 7373, 36), found(1024, 8192, 64), found(1024, 8192, float("nan")),
                 found(1024, 8192, 36.5), found(1024, 8192, 36, "sglang")):  # fmt: skip
        assert miss == m.LaunchSettings() and not miss and miss.label() == ""


@pytest.mark.parametrize(
    ("max_prefill", "chunk", "dp", "dp_attention", "per_rank"),
    [
        (32768, 65536, 4, True, 16384),  # DP 4 divides the chunk: 16,384 < 32,768
        (524288, 131072, 1, False, 131072),  # TP 4 without DP: the chunk as written
        (None, 131072, 8, True, 16384),  # --max-prefill-tokens unset: SGLang's 16,384
        (32768, 32768, 8, True, 4096),
        (8192, 8192, 4, False, 8192),  # dp given without attention-DP divides nothing
    ],
)
def test_an_sglang_prefill_rank_takes_the_smaller_of_its_two_budgets(
    max_prefill, chunk, dp, dp_attention, per_rank
):
    assert m.sglang_prefill_tokens_per_rank(max_prefill, chunk, dp, dp_attention) == per_rank


def test_a_prefill_budget_joins_the_launch_entry_to_its_recipe_file(tmp_path):
    # given two launch entries of one recipe file and its stated budgets
    recipes = tmp_path / "recipes.csv"
    recipes.write_text(
        RECIPE_HEADER
        + "k,dynamo-sglang,fp4,gb200,img,1024,1024,none,4,4,4,true,1,32,32,true,,512 2048,"
        "recipes/gb200-fp4/1k1k/mid-curve.yaml,abc\n"
        + "k,dynamo-sglang,fp8,gb200,img,8192,1024,none,1,8,1,false,7,8,1,false,,4,"
        "recipes/gb200-fp8/8k1k/low-latency.yaml,abc\n"
        + "k,dynamo-trt,fp4,gb200,img,1024,1024,none,4,4,4,true,1,32,32,true,64,512,"
        "recipes/gb200-fp4/1k1k/mid-curve.yaml,abc\n"
    )
    sglang = tmp_path / "sglang.csv"
    sglang.write_text(
        "config_file,recipe_repository,recipe_commit,prefill_tp,prefill_dp,"
        "prefill_dp_attention,max_prefill_tokens,chunked_prefill_size\n"
        "recipes/gb200-fp4/1k1k/mid-curve.yaml,o/r,c,4,4,true,32768,65536\n"
        "recipes/gb200-fp8/8k1k/low-latency.yaml,o/r,c,8,1,false,,\n"
    )
    # when the budgets are keyed like the decode batches
    budgets = m.recipe_prefill_budgets(recipes, sglang)
    layout = m.disaggregated_layout(
        "prefill 16 GPUs (4 worker(s), TP4 EP4, DP-attention), "
        "decode 32 GPUs (1 worker(s), TP32 EP32, DP-attention)"
    )
    # then the SGLang entry's ranks take 65,536 / 4 = 16,384 tokens a step, at its clients only
    assert m.recipe_value(budgets, "sglang", "gb200", "fp4", 1024, 1024, layout, 2048) == 16384
    assert m.recipe_value(budgets, "sglang", "gb200", "fp4", 1024, 1024, layout, 64) == 0
    # and a TRT-LLM entry naming the same file, or a recipe stating no chunk, gives none
    assert m.recipe_value(budgets, "trtllm", "gb200", "fp4", 1024, 1024, layout, 512) == 0
    assert len(budgets) == 2


def test_the_shipped_sglang_recipes_state_most_prefill_budgets():
    # every NVIDIA SGLang launch entry's recipe file was read; one (a sweep of three
    # budgets in one file) states none that a row can take
    budgets = m.recipe_prefill_budgets()
    values = {v for found in budgets.values() for v in found}
    assert {4096, 8192, 16384, 32768, 131072, 163840} <= values
    assert all(key[0] == "sglang" for key in budgets)


def test_the_shipped_recipes_cover_most_disaggregated_trtllm_rows():
    batches = m.recipe_decode_batches()
    rows, _ = m.read_shipped_measurements()
    matched = total = 0
    for row in rows:
        layout = m.disaggregated_layout(row.notes) if row.disaggregated else None
        if layout is None or row.engine_family != "trtllm" or row.speculative:
            continue
        total += 1
        gpu = row.gpu.split()[0].lower()  # "H100 SXM" -> the recipes' "h100"
        batch = m.recipe_value(batches, "trtllm", gpu, row.weight_precision, row.isl,
                                   row.osl, layout, int(row.concurrency))  # fmt: skip
        matched += batch > 0
    assert total > 100 and matched / total > 0.8, (matched, total)


@pytest.mark.parametrize(
    ("notes", "flagged"),
    [
        ("B200 DEP4. DEP = attention data-parallel + expert-parallel", True),
        ("single node, TP8 EP8, DP-attention; num_gpus = TP", True),
        ("llm_options: enable_attention_dp, kv fp8", True),
        ("8 GPUs, tensor parallel, dependency on the dataset", False),
        ("", False),
    ],
)
def test_rows_that_ran_attention_data_parallel_are_flagged(notes, flagged):
    # given a row whose notes say (or do not say) it ran attention data-parallel
    (row,) = _read({"notes": notes, "model": "DeepSeek-R1-0528", "num_gpus": "4", "tp": "4"})
    # then the flag follows the notes, and the layout the model predicts it with is TP 1 with
    # the four GPUs as attention ranks and the experts over them
    assert ("attention_dp" in row.flags) is flagged
    assert _layout(row) == ((4, 1, 1, 4) if flagged else (4, 4, 1, 1))


def _inferencex_row(gpu: str, engine: str, precision: str, tp: int, concurrency: int):
    """A shipped-format InferenceX closed-loop row (median TTFT) of DeepSeek-R1."""
    return m.measurement_from_row(
        {
            "source": "SemiAnalysisAI/InferenceX-app:packages/app/cypress/fixtures/api/"
            "benchmarks.json@528c4146b8f5 (capture 2026-06-14)",
            "model": "DeepSeek-R1-0528", "gpu": gpu, "num_gpus": str(tp), "tp": str(tp),
            "pp": "1", "ep": "1", "engine": engine, "weight_precision": precision,
            "isl": "1024", "osl": "1024", "concurrency_or_rate": f"concurrency={concurrency}",
            "metric": "ttft_ms_median", "value": "400",
        },
        line=2,
    )  # fmt: skip


def test_launch_recipes_give_sglang_on_blackwell_its_poll_interval_and_memory():
    # given InferenceX rows of SGLang on B200 and B300 (whose scripts poll every 10 decode
    # steps below 16 clients and every 30 from 16), of SGLang on H200 and of TRT-LLM on B200
    rows = [
        _inferencex_row("B200", "SGLang", "fp8", 8, 4),
        _inferencex_row("B200", "SGLang", "fp8", 8, 32),
        _inferencex_row("B300", "SGLang", "fp4", 4, 16),
        _inferencex_row("B200", "SGLang", "fp8", 4, 32),
        _inferencex_row("H200", "SGLang", "fp8", 8, 32),
        _inferencex_row("B200", "TensorRT-LLM", "fp8", 8, 32),
    ]
    # when the shipped launch recipes are applied
    out = m.with_launch_recipes(rows)
    # then each carries its script's interval; the others keep every engine's default, 1
    assert [row.scheduler_recv_interval for row in out] == [10, 30, 30, 10, 1, 1]
    # and its --mem-fraction-static and --max-running-requests (dsr1_fp8_b200.sh: TP 8 0.82
    # / 128, TP 4 0.95 / 32; dsr1_fp4_b200.sh, reused on B300: 0.85 / 256); a run without a
    # recipe line keeps the engine's defaults (0)
    got = [(row.gpu_memory_utilization, row.max_num_seqs) for row in out]
    assert got == [(0.82, 128), (0.82, 128), (0.85, 256), (0.95, 32), (0.0, 0), (0.0, 0)]


def test_deepseek_r1_fp8_on_four_b200_holds_its_32_clients_at_the_recipe_share(catalog):
    # given the InferenceX run of DeepSeek-R1 FP8 on 4 x B200 at TP 4, 8k/1k, 32 clients
    # (measured median TTFT 799 ms), as the fit reads it
    from fleets.calibration import catalog_points
    from sizing.calibrate import point_engine, predict_points

    row = _inferencex_row("B200", "SGLang", "fp8", 4, 32)
    row = m.with_launch_recipes([m.replace(row, isl=8192.0, osl=1024.0)])[0]
    [point], _ = catalog_points([row])
    # then the engine runs at the recipe's 0.95 share with 32 running sequences
    engine = point_engine(point)
    assert engine.gpu_memory_utilization == 0.95 and engine.max_num_seqs == 32
    # and 168 GB of weights per GPU leave room for all 32 clients: no wait for a slot (at
    # the 0.90 default the cache held 4 sequences and the predicted TTFT was 62 s)
    assert predict_points([point])[0] < 5_000


def test_the_shipped_launch_recipes_cite_their_script():
    with m.AGG_RECIPES_CSV.open(newline="") as handle:
        recipes = list(csv.DictReader(handle))
    assert recipes and all("InferenceX" in r["source"] and ".sh@" in r["source"] for r in recipes)
    assert {int(r["scheduler_recv_interval"]) for r in recipes} == {10, 30}
    assert all(0 < float(r["mem_fraction_static"]) <= 1 for r in recipes)
    assert all(int(r["max_running_requests"]) > 0 for r in recipes)
