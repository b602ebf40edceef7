"""Warnings on absurd results and the binding reason when nothing fits (sizing.plausibility)."""

from sizing.plausibility import nothing_fits, plausibility_warnings


def test_a_million_requests_per_second_is_flagged_three_ways():
    # given the case: 1e6 req/s of chat sized to $980 M/month on 407,952 GPUs
    warnings = plausibility_warnings(
        peak_rps=1e6,
        mean_rps=5e5,
        tokens_per_request=1300,
        usd_per_month=980e6,
        gpus=407_952,
    )
    # then the rate, the tokens (5e5 x 1,300 x 2,628,000 s = 1.71e15 = 1,710 T), the cost
    # and the GPU count each get a line
    assert warnings == [
        "peak 1,000,000 requests/s is above 100,000 requests/s: check the unit "
        "(requests per second, not per minute or hour)",
        "1,710 T tokens/month is above 10 T: check the mean rate and the token lengths",
        "$980 M/month is above $10 M/month for one service: check the traffic and the prices "
        "before anyone signs",
        "407,952 GPUs is above 10,000, the scale of the largest clusters: check the traffic",
    ]


def test_an_ordinary_review_has_no_warning_and_a_bad_price_has_one():
    assert (
        plausibility_warnings(
            peak_rps=20,
            mean_rps=10,
            tokens_per_request=1300,
            usd_per_month=24_051,
            gpus=8,
            usd_per_mtok=1.2,
            api_usd_per_mtok=0.9,
        )
        == []
    )
    # $45/M tokens against a $0.90 API is 50x
    warning = plausibility_warnings(peak_rps=20, usd_per_mtok=45.0, api_usd_per_mtok=0.9)
    assert warning == [
        "self-hosting at $45.00/M tokens is 50x the API's $0.90/M: check the GPU price and "
        "the traffic"
    ]
    assert plausibility_warnings(peak_rps=None, usd_per_month=float("nan")) == []


def test_nothing_fits_gives_the_largest_replicas_reason():
    rows = [
        {"fits": False, "meets_slo": False, "gpus_per_replica": 1, "reason": "weights 1"},
        {
            "fits": False,
            "meets_slo": False,
            "gpus_per_replica": 8,
            "reason": "weights 167.8 GB per GPU > 71.9 GB usable on each of 8 H100 (TP8)",
        },
    ]
    assert nothing_fits(rows) == (
        "nothing fits: weights 167.8 GB per GPU > 71.9 GB usable on each of 8 H100 (TP8) "
        "(2 candidates tried)"
    )


def test_fitting_rows_missing_the_slo_name_the_closest_and_its_miss():
    slow = {
        "fits": True,
        "meets_slo": False,
        "binding_constraint": "tpot",
        "tpot_ms": 80.0,
        "ttft_ms": 900.0,
        "model_name": "Llama 70B",
        "precision": "fp8",
        "gpu_name": "H100",
        "tp": 2,
        "pp": 1,
        "gpus_per_replica": 2,
    }
    closer = slow | {"tpot_ms": 62.0, "tp": 4, "gpus_per_replica": 4}
    misfit = {"fits": False, "meets_slo": False, "reason": "x", "gpus_per_replica": 1}
    message = nothing_fits([slow, closer, misfit], {"tpot_ms": 50, "ttft_ms": 2000})
    # 62/50 = 1.24 beats 80/50 = 1.6
    assert message == (
        "nothing meets the SLOs: the closest option, Llama 70B fp8 on H100 TP4, misses "
        "TPOT 62 ms > 50 ms (2 of 3 candidates fit)"
    )
    assert nothing_fits([closer | {"meets_slo": True}]) is None
    assert nothing_fits([]) is None
