"""Exports for finance, read back with openpyxl: sheets, formats, rounding, formula guard, 409."""

import copy
import csv
import io
import tracemalloc

import pytest
from django.db import connection
from django.http import FileResponse, StreamingHttpResponse
from django.test.utils import CaptureQueriesContext
from openpyxl import load_workbook
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from planner import exports
from planner.models import CandidateResult, SizingRun
from planner.services import share_link_create, sizing_run_start
from tests.factories import UserFactory, make_scenario

pytestmark = pytest.mark.django_db
EVIL = '=HYPERLINK("http://evil.example","click")'


@pytest.fixture
def finished(catalog):
    owner = UserFactory(username="analyst")
    scenario = make_scenario(
        owner,
        name=EVIL,
        models=["Llama-3.1-8B-Instruct"],
        gpus=["H100", "L40S"],
        precisions=["bf16"],
        gpu_prices={"H100": 2.5},
    )
    run = sizing_run_start(scenario=scenario)
    assert run.status == "succeeded"
    # a catalog-supplied name that a spreadsheet would run
    run.results.filter(rank=1).update(model_name="@SUM(1+1)*cmd|' /C calc'!A0")
    return run


def test_safe_text_guards_every_formula_prefix():
    for text in ["=1+1", "+1", "-1", "@A1", "\tx", "\rx"]:
        assert exports.safe_text(text) == "'" + text
    assert exports.safe_text("Llama 3.1 8B") == "Llama 3.1 8B"
    assert (exports.cents(24051.30000000001), exports.sig(0.0123456), exports.sig(12345.6)) == (
        24051.3,
        0.01235,
        12350.0,
    )


def test_xlsx_has_inputs_summary_results_with_formats(finished):
    book = load_workbook(io.BytesIO(exports.run_xlsx(finished)))
    assert book.sheetnames == ["summary", "results", "inputs"]
    results = book["results"]
    header = [c.value for c in results[1]]
    for name in ["ttft_ms_p50", "ttft_ms_p95", "ttft_ms_p99", "tpot_ms_p95", "price_source"]:
        assert name in header
    col = {name: i for i, name in enumerate(header)}
    rows = list(results.iter_rows(min_row=2))
    assert len(rows) == finished.candidate_count
    first = rows[0]
    # real booleans, guarded text, money in cents with a currency format
    assert first[col["fits"]].value is True and isinstance(first[col["meets_slo"]].value, bool)
    assert first[col["model"]].value == "'@SUM(1+1)*cmd|' /C calc'!A0"
    assert first[col["model"]].data_type == "s"
    priced = [r for r in rows if r[col["usd_per_month"]].value is not None]
    assert priced
    for row in priced:
        month = row[col["usd_per_month"]]
        assert month.number_format == exports.USD and round(month.value, 2) == month.value
        assert row[col["price_source"]].value
    # nodes: replicas packed into the priced instance, policy.spare_nodes = 0
    # (a disaggregated row packs each pool into nodes of its own)
    for row in rows:
        if row[col["fits"]].value and row[col["replicas"]].value:
            node = row[col["gpus_per_node"]].value
            pools = [("", "replicas", "gpus_per_replica")]
            if row[col["mode"]].value == "disagg":
                pools = [(p, f"{p}_workers", f"{p}_tp") for p in ("prefill", "decode")]
            expected = sum(
                -(-row[col[workers]].value // (node // row[col[per_worker]].value))
                for _, workers, per_worker in pools
            )
            assert row[col["nodes"]].value == expected
    h100 = next(r for r in priced if r[col["gpu_slug"]].value == "h100_sxm")
    assert h100[col["usd_per_gpu_hour"]].value == 2.5
    assert h100[col["price_source"]].value.startswith("custom $2.5/GPU-h")
    # the scenario's name is text, never a live formula, on every sheet
    inputs = {r[0].value: r[1] for r in book["inputs"].iter_rows() if r and r[0].value}
    assert inputs["scenario"].value == "'" + EVIL and inputs["scenario"].data_type == "s"
    assert inputs["spare_nodes (N+k nodes)"].value == 0
    prices = [r for r in book["inputs"].iter_rows(values_only=True) if r[0] == "L40S"]
    # L40S is on one instance shape only: AWS g6e.12xlarge, 4 GPUs, $2.6232 on demand
    assert prices and prices[0][2:6] == (2.6232, "AWS", "L40S (g6e.12xlarge, 4 GPU)", 4)
    summary = book["summary"]
    head = [c.value for c in summary[1]]
    assert {"hybrid_usd_per_month", "breakeven_tokens_per_month", "replicas_low"} <= set(head)
    lines = list(summary.iter_rows(min_row=2, values_only=True))
    assert {line[0] for line in lines} <= {"per GPU", "best overall", "per model"}
    assert any(line[0] == "best overall" for line in lines)
    for cell in (c for row in book.worksheets for line in row.iter_rows() for c in line):
        assert cell.data_type != "f", cell.coordinate


def test_csv_guards_text_and_rounds_money(finished):
    rows = list(csv.DictReader(io.StringIO(exports.run_csv(finished))))
    assert rows[0]["model"].startswith("'@SUM")
    assert rows[0]["fits"] in ("true", "false")
    for row in rows:
        if row["usd_per_month"]:
            whole, _, decimals = row["usd_per_month"].partition(".")
            assert len(decimals) <= 2, row["usd_per_month"]


def test_unfinished_run_is_a_409_with_the_reason_everywhere(finished, client):
    # given the same run seen as still running
    SizingRun.objects.filter(pk=finished.pk).update(status="running", progress=40)
    owner = finished.scenario.owner
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=owner).key}")
    answer = api.get(f"/api/v1/runs/{finished.pk}/export.xlsx")
    assert answer.status_code == 409
    assert answer.json()["message"] == (
        f"run {finished.pk} is running (40% done): export it once it has finished"
    )
    assert api.get(f"/api/v1/runs/{finished.pk}/export.csv").status_code == 409
    client.force_login(owner)
    assert client.get(f"/runs/{finished.pk}/export.csv").status_code == 409
    page = client.get(f"/runs/{finished.pk}/").content.decode()
    assert "when the run finishes" in page and "/export.xlsx" not in page
    _, token = share_link_create(user=owner, scenario=finished.scenario, run=finished)
    client.logout()
    assert client.get(f"/s/{token}/export.xlsx").status_code == 409
    # and a failed run says why
    SizingRun.objects.filter(pk=finished.pk).update(status="failed", error="boom")
    answer = api.get(f"/api/v1/runs/{finished.pk}/export.csv")
    assert answer.status_code == 409 and "failed" in answer.json()["message"]


def test_anonymous_share_export_is_guarded_too(finished, client):
    _, token = share_link_create(
        user=finished.scenario.owner, scenario=finished.scenario, run=finished
    )
    answer = client.get(f"/s/{token}/export.xlsx")
    assert answer.status_code == 200
    book = load_workbook(io.BytesIO(answer.getvalue()))
    scenario = next(r for r in book["inputs"].iter_rows() if r[0].value == "scenario")[1]
    assert scenario.value == "'" + EVIL


# --------------------------------------------------------------------------- streaming


def _grow(run: SizingRun, rows: int) -> SizingRun:
    """Copy the run's result rows (new candidate keys, same values) until it holds ``rows``."""
    template = list(run.results.order_by("rank", "candidate_key"))
    copies = []
    for index in range(len(template), rows):  # numbered on from the rows there: keys unique
        row = copy.copy(template[index % len(template)])
        row.pk, row.candidate_key = None, f"{row.candidate_key}#copy{index}"
        copies.append(row)
    CandidateResult.objects.bulk_create(copies, batch_size=1000)
    return run


def _peak_bytes(work) -> int:
    """tracemalloc's peak while ``work()`` runs."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _send(response) -> None:
    """Consume a streamed body chunk by chunk and drop each, as a server sends it."""
    for _ in response:
        pass
    # not response.close(): it sends request_finished, which closes the test's connection
    if isinstance(response, FileResponse):
        response.file_to_stream.close()


def _reads_results(queries) -> bool:
    return any('FROM "planner_candidateresult"' in q["sql"] for q in queries)


def test_csv_download_streams_rows_as_it_reads_them(finished, client):
    """The views answer with a StreamingHttpResponse that has not read a result row yet;
    the rows are read from the cursor while the body is consumed."""
    _grow(finished, 600)
    client.force_login(finished.scenario.owner)
    api = APIClient()
    api.force_authenticate(finished.scenario.owner)
    _, token = share_link_create(
        user=finished.scenario.owner, scenario=finished.scenario, run=finished
    )
    for who, url in [
        (client, f"/runs/{finished.pk}/export.csv"),
        (api, f"/api/v1/runs/{finished.pk}/export.csv"),
        (client, f"/s/{token}/export.csv"),
    ]:
        with CaptureQueriesContext(connection) as answering:
            answer = who.get(url)
        assert isinstance(answer, StreamingHttpResponse), url
        assert answer["Content-Disposition"] == (
            f'attachment; filename="headroom-run-{finished.pk}.csv"'
        )
        assert not _reads_results(answering.captured_queries), url
        with CaptureQueriesContext(connection) as streaming:
            chunks = list(answer.streaming_content)
        assert _reads_results(streaming.captured_queries), url
        assert len(chunks) > 2  # sent in pieces, not as one body
        rows = list(csv.DictReader(io.StringIO(b"".join(chunks).decode())))
        assert len(rows) == 600 and rows[0]["model"].startswith("'@SUM"), url


def test_csv_memory_grows_far_less_than_the_run(finished):
    """Ten times the rows costs nowhere near ten times the memory: a chunk of rows is held,
    never the queryset (before streaming, the peak grew with every row)."""
    _grow(finished, 100)
    small = _peak_bytes(lambda: _send(exports.csv_response(finished)))
    _grow(finished, 1000)
    large = _peak_bytes(lambda: _send(exports.csv_response(finished)))
    assert large < 2 * small, (small, large)


def test_xlsx_download_is_a_file_built_in_write_only_mode(finished, client):
    """The workbook is written row by row into a temporary file that the response streams;
    ten times the rows costs nowhere near ten times the memory."""
    client.force_login(finished.scenario.owner)
    answer = client.get(f"/runs/{finished.pk}/export.xlsx")
    assert isinstance(answer, FileResponse)
    assert answer["Content-Type"] == exports.XLSX_TYPE
    assert answer["Content-Disposition"] == (
        f'attachment; filename="headroom-run-{finished.pk}.xlsx"'
    )
    assert int(answer["Content-Length"]) == len(answer.getvalue())
    _grow(finished, 100)
    small = _peak_bytes(lambda: _send(exports.xlsx_response(finished)))
    _grow(finished, 1000)
    large = _peak_bytes(lambda: _send(exports.xlsx_response(finished)))
    assert large < 2 * small, (small, large)


def test_a_mixed_checkpoint_row_names_its_experts_precision_in_every_door(catalog, client):
    # given a run of gpt-oss-120b (published with MXFP4 experts, bf16 attention) on H100
    owner = UserFactory(username="moe-analyst")
    scenario = make_scenario(owner, models=["gpt-oss-120b"], gpus=["H100"], precisions=["bf16"],
                             gpu_prices={"H100": 2.5})  # fmt: skip
    run = sizing_run_start(scenario=scenario)
    assert run.status == "succeeded", run.error
    # then every row says its experts are mxfp4 beside the swept bf16
    assert set(run.results.values_list("precision", "expert_precision")) == {("bf16", "mxfp4")}
    client.force_login(owner)
    api = client.get(f"/api/v1/runs/{run.pk}/results/", {"limit": 100}).json()["results"]
    assert {(r["precision"], r["expert_precision"]) for r in api} == {("bf16", "mxfp4")}
    rows = list(csv.DictReader(io.StringIO(exports.run_csv(run))))
    assert {(r["weight_precision"], r["expert_precision"]) for r in rows} == {("bf16", "mxfp4")}
    # and the recommendation card's fields carry it (one published checkpoint fits one H100)
    [card] = [e for e in run.summary["per_gpu"] if e.get("recommended")]
    assert card["expert_precision"] == "mxfp4"
