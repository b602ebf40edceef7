"""The `simulate` command-line contract and `predict --simulate`."""

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db
BASE = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100_sxm", "--num-gpus", "1",
        "--tp", "1", "--precision", "fp8", "--requests", "200", "--isl", "1000",
        "--osl", "100"]  # fmt: skip


def run(*args) -> dict:
    out = io.StringIO()
    call_command("simulate", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_json_object_has_the_contract_keys(catalog):
    # given a closed-loop run, when simulated, then one JSON object with the contract's keys
    res = run(*BASE, "--concurrency", "16", "--ttft-slo", "2000", "--tpot-slo", "50")
    assert set(res) == {"ttft_ms", "tpot_ms", "e2e_ms", "throughput_tok_s", "goodput",
                        "preemptions", "requests", "simulated_s"}  # fmt: skip
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert list(res[key]) == ["p50", "p90", "p95", "p99"]
        assert 0 < res[key]["p50"] <= res[key]["p99"]
    assert res["requests"] == 200 and res["throughput_tok_s"] > 0 and res["goodput"] == 1.0


def test_open_loop_bursty_lognormal_is_seeded(catalog):
    args = (*BASE, "--rate", "5", "--arrival", "gamma", "--cv", "2", "--isl-p95", "3000",
            "--osl-p95", "300", "--seed", "4")  # fmt: skip
    assert run(*args) == run(*args)


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--model", "Llama-9-1T", "--rate", "1"], "unknown model 'Llama-9-1T'"),
        (["--gpu", "Voodoo5", "--rate", "1"], "unknown GPU 'Voodoo5'"),
        (["--rate", "-1"], "--rate"),
        (["--rate", "1", "--concurrency", "2"], "not allowed with"),
        ([], "one of the arguments --rate --concurrency is required"),
        (["--rate", "1", "--precision", "bf17"], "unknown precision 'bf17'"),
        (["--rate", "1", "--isl-p95", "10"], "--isl-p95: p95 (10) must be at least the mean"),
        (["--rate", "1", "--osl-p95", "100000"], "--osl-p95: p95 (100000) can be at most 3.87x"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(catalog, extra, fragment):
    # argparse: the last occurrence of an option wins, so extra overrides BASE
    with pytest.raises(SystemExit) as exc, _capture_stderr() as err:
        call_command("simulate", *BASE, *extra, "--json")
    assert exc.value.code == 2
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0], lines


class _capture_stderr:
    def __enter__(self):
        self.old, sys.stderr = sys.stderr, io.StringIO()
        return sys.stderr

    def __exit__(self, *exc):
        sys.stderr = self.old


def test_missing_required_argument_exits_2_from_the_shell():
    # a real process (settings from the environment), no catalog needed for a parse error
    out = subprocess.run([sys.executable, "manage.py", "simulate", "--json"], cwd=ROOT,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1


def test_predict_simulate_replaces_latencies_with_the_simulators(catalog, tmp_path):
    source = tmp_path / "in.csv"
    source.write_text("model,gpu,num_gpus,tp,pp,ep,weight_precision,kv_precision,isl,osl,"
                      "concurrency\nllama-3.1-8b,H100,1,1,,,fp8,,1000,200,16\n"
                      "llama-3.1-70b,H100,1,1,,,bf16,,1000,200,16\n")  # fmt: skip
    rows = {}
    for flag in ([], ["--simulate"]):
        out = tmp_path / f"out{len(flag)}.csv"
        call_command("predict", str(source), "-o", str(out), *flag, stderr=io.StringIO())
        rows[bool(flag)] = list(csv.DictReader(out.open()))
    mva, sim = rows[False][0], rows[True][0]
    assert sim["fits"] == "true" and sim["ttft_ms"] != mva["ttft_ms"]
    # the shipped profiles carry the mean-value model's fitted wave term (the wait behind
    # re-arriving prompts); the simulator's closed loop de-synchronizes after one cycle and
    # does not reproduce it, hence the wider TTFT band (24 % apart at c=16 here)
    assert float(sim["ttft_ms"]) == pytest.approx(float(mva["ttft_ms"]), rel=0.30)
    assert float(sim["tpot_ms"]) == pytest.approx(float(mva["tpot_ms"]), rel=0.15)
    assert rows[True][1]["fits"] == "false"  # a misfit stays a misfit


def test_simulate_picks_the_profile_predict_picks_for_the_same_row(catalog):
    # given hopper x vLLM profiles for any precision, for fp8 and for release 0.18, each
    # with its own per-step overhead
    from fleets.calibration import save_profiles
    from fleets.models import CalibrationProfile

    CalibrationProfile.objects.all().delete()
    base = dict(gpu_slug=None, generation="hopper", engine_family="vllm", free_constants=[],
                relative_error=0.2, n_points=10)  # fmt: skip
    save_profiles(
        [
            {**base, "name": "any", "precision": "", "constants": {"step_overhead_s": 0.002}},
            {**base, "name": "fp8", "precision": "fp8", "constants": {"step_overhead_s": 0.02}},
            {
                **base,
                "name": "0.18",
                "precision": "",
                "engine_version": "0.18",
                "constants": {"step_overhead_s": 0.01},
            },
        ],  # fmt: skip
        "shipped fit",
    )
    closed = ("--concurrency", "4")
    # when simulating the same row at fp8 and at bf16, and naming the release
    fp8 = run(*BASE, *closed)["tpot_ms"]["p50"]
    bf16 = run(*BASE, *closed, "--precision", "bf16")["tpot_ms"]["p50"]
    release = run(*BASE, *closed, "--precision", "bf16", "--engine-version", "v0.18.1")
    # then each run used the most specific profile, as predict does: fp8's 20 ms step
    # overhead, the family's 2 ms, release 0.18's 10 ms
    assert fp8 > 20.0 > release["tpot_ms"]["p50"] > 10.0 > bf16 > 2.0


def test_blank_expert_precision_is_the_checkpoints(catalog):
    # given gpt-oss-120b, whose published experts are MXFP4 under bf16 attention weights
    args = ["--model", "gpt-oss-120b", "--gpu", "h100_sxm", "--num-gpus", "1", "--tp", "1",
            "--precision", "bf16", "--requests", "100", "--isl", "1000", "--osl", "100",
            "--concurrency", "4"]  # fmt: skip
    # when simulated with the experts blank and named mxfp4, then the two agree
    assert run(*args) == run(*args, "--expert-precision", "mxfp4")
    # and bf16 experts (234 GB) do not fit one H100: refused naming the memory
    with pytest.raises(SystemExit) as exc, _capture_stderr() as err:
        call_command("simulate", *args, "--expert-precision", "bf16", "--json")
    assert exc.value.code == 2 and "does not fit" in err.getvalue()


def test_an_engine_version_without_a_release_is_refused(catalog):
    with pytest.raises(SystemExit) as exc, _capture_stderr() as err:
        call_command("simulate", *BASE, "--rate", "1", "--engine-version", "latest", "--json")
    assert exc.value.code == 2 and "--engine-version" in err.getvalue()
