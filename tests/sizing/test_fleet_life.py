"""Cold start, autoscaling over the day, and buy vs rent: hand-derived numbers."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sizing import autoscale, coldstart, ownership
from sizing import breakeven as be
from sizing.derivation import evaluate
from sizing.specs import Traffic


def _formula_steps_evaluate(steps):
    for s in steps:
        if s.kind == "formula":
            assert evaluate(s.formula, s.inputs) == pytest.approx(s.value, rel=1e-9), s.name


# ------------------------------------------------------------------ cold start
def test_cold_start_chain_70b_tp8_from_nvme():
    # given 141.12 GB over 8 GPUs (17.64 GB each) from NVMe at 6.5 GB/s, a 12 GB image at
    # 0.5 GB/s (the defaults)
    inputs = coldstart.from_block({"weights_source": "nvme"})
    # when
    result, steps = coldstart.cold_start(inputs, 17.64, 8)
    # then every link is its own number: 24 s pull, 17.64 * 8 / 6.5 = 21.711 s load,
    # 30 + 17 + 2 s init, graphs, warm-up
    assert result.image_pull_s == pytest.approx(24.0)
    assert result.weight_load_s == pytest.approx(17.64 * 8 / 6.5)
    assert result.cold_start_s == pytest.approx(24 + 21.7108 + 49, abs=1e-4)
    assert "141.1 GB over 8 GPUs from nvme at 6.5 GB/s" in steps[1].note
    # the total's note lists each default with its source
    assert "image_gb = 12 GB" in steps[-1].note and "issues/27154" in steps[-1].note
    assert "weights_gb_s = 6.5 GB/s" in steps[-1].note and "PM9A3" in steps[-1].note
    assert "weights_gb_s" in inputs.defaults and "weights_source" not in inputs.defaults
    _formula_steps_evaluate(steps)


def test_cold_start_cached_image_and_per_gpu_source():
    # given a cached image and peer GPUs at 50 GB/s each (shards load in parallel)
    inputs = coldstart.from_block({"image_cached": True, "weights_source": "peer", "init_s": 5})
    result, steps = coldstart.cold_start(inputs, 17.64, 8)
    # then no pull, 17.64 / 50 = 0.3528 s load
    assert result.image_pull_s == 0.0
    assert result.weight_load_s == pytest.approx(0.3528)
    assert result.cold_start_s == pytest.approx(0.3528 + 5 + 17 + 2)
    _formula_steps_evaluate(steps)


# ------------------------------------------------------------------ autoscaling policy
def _policy(**block):
    inputs = autoscale.from_block(block)
    # X = 1.5 req/s, W = 10 s, u = 0.7, 23 serving at the peak of 20 req/s x 1.2 burst, 70 s start
    return autoscale.design(inputs, 1.5, 10.0, 0.7, 23, 20.0, 1.2, 70.0)


def test_policy_thresholds_cooldowns_and_warm_pool_from_the_ramp():
    policy, steps = _policy(burst_ramp_rps_per_s=0.2)
    # scale-up at X W u = 10.5 in flight; down at 10.5 * 22 / 23 = 10.043
    assert policy.in_flight_target == pytest.approx(10.5)
    assert policy.scale_down_in_flight == pytest.approx(10.5 * 22 / 23)
    assert policy.scale_up_cooldown_s == 70  # >= the cold start
    assert policy.scale_down_cooldown_s == 300  # max(60 s burst, HPA's 300 s default)
    # warm pool: ceil(0.2 * 70 / 1.5) = ceil(9.33) = 10
    assert policy.warm_pool_replicas == 10
    assert policy.max_replicas == 23 and policy.min_replicas == 1
    assert policy.first_request_wait_s == 0
    _formula_steps_evaluate(steps)


def test_default_ramp_is_the_burst_factor_within_the_burst():
    # 20 * 0.2 / 60 = 0.0667 req/s per s -> ceil(0.0667 * 70 / 1.5) = ceil(3.11) = 4
    policy, steps = _policy()
    assert policy.ramp_rps_per_s == pytest.approx(20 * 0.2 / 60)
    assert policy.warm_pool_replicas == 4
    _formula_steps_evaluate(steps)


def test_scale_to_zero_first_request_waits_a_cold_start():
    policy, _ = _policy(min_replicas=0, burst_ramp_rps_per_s=0)
    assert policy.warm_pool_replicas == 0
    assert policy.first_request_wait_s == 70.0


# ------------------------------------------------------------------ the fluid day
def test_fluid_queue_without_warm_pool_burst_waits_for_the_cold_start():
    # given a policy with W = 1 s (target 1.5 * 1 * 1 = 1.5 in flight per replica), X = 1.5,
    # 10 s cold start, and a step from 1.5 req/s to 3 req/s for 20 s
    policy = autoscale.ScalingPolicy("s", 1.5, 0.0, 10.0, 300.0, 1, 4, 0, 0.0, 0.0)
    rates = np.array([1.5] * 5 + [3.0] * 20 + [1.5] * 40)
    day = autoscale.simulate(rates, 1.0, policy, 1.5, 1.0, 10.0, slack_s=0.0)
    # then a second replica is ordered at t = 5 and ready at t = 15: 10 s of 1.5 req/s queue
    assert day.starting[5] == 1 and day.active[14] == 1 and day.active[15] == 2
    assert day.queue[14] == pytest.approx(15.0)  # 10 s x (3 - 1.5) req/s
    # FIFO: the old queue is served first, so from t = 6 each second's 3 arrivals all wait
    assert day.late[5:15].sum() == pytest.approx(1.5 + 9 * 3)
    # t = 15: queue 15 -> wants ceil((3 + 15) / 1.5) = 12 -> max 4, 2 more ready at t = 25;
    # until then 2 replicas carry 3 req/s and the 15 stay queued (30 late); then it drains
    # 10.5, 6, 1.5, 0 (4.5 late): 63 late of 5 * 1.5 + 20 * 3 + 40 * 1.5 = 127.5
    assert day.active[25] == 4
    assert day.late.sum() == pytest.approx(63.0)
    assert day.slo_share == pytest.approx(1 - 63 / 127.5)


def test_fluid_queue_warm_pool_absorbs_the_burst():
    policy = autoscale.ScalingPolicy("s", 1.5, 0.0, 10.0, 300.0, 1, 4, 1, 0.0, 0.0)
    rates = np.array([1.5] * 5 + [3.0] * 20 + [1.5] * 40)
    day = autoscale.simulate(rates, 1.0, policy, 1.5, 1.0, 10.0, slack_s=0.0)
    assert day.late.sum() == 0.0
    assert day.slo_share == 1.0


def test_scale_down_waits_for_the_stabilization_window():
    policy = autoscale.ScalingPolicy("s", 1.5, 0.0, 10.0, 30.0, 1, 4, 0, 0.0, 0.0)
    rates = np.array([6.0] * 5 + [1.5] * 60)
    day = autoscale.simulate(rates, 1.0, policy, 1.5, 1.0, 10.0, slack_s=1.0)
    # four replicas at 6 req/s; the last wish for 4 (t = 4) leaves the 30 s window at t = 35
    assert day.active[0] == 4 and day.active[34] == 4 and day.active[35] == 1


def test_minute_rates_keep_the_hourly_mean_and_add_the_burst():
    hourly = [10.0] * 12 + [30.0] * 12
    rates, start = autoscale.minute_rates(hourly)
    assert rates.mean() == pytest.approx(20.0)
    with_burst, start = autoscale.minute_rates(hourly, 0.5, 60.0)
    # one minute gets the ramp's mean, 0.5 * 30 = 15 req/s extra
    assert start == 12 * 60
    assert (with_burst - rates).sum() == pytest.approx(15.0)


def test_spot_priced_with_fallback():
    usd = autoscale.spot_usd_per_hour(10, 20.0, 0.5, 0.6, 0.01, 90.0)
    assert usd == pytest.approx(140.025)


def test_autoscaled_cost_step_evaluates():
    policy = autoscale.ScalingPolicy("s", 1.5, 0.0, 10.0, 300.0, 1, 4, 1, 0.0, 0.0)
    day = autoscale.simulate(np.full(60, 1.5), 60.0, policy, 1.5, 1.0, 10.0, 1.0)
    usd, steps = autoscale.autoscaled_usd_per_month(day, 1, 20.0, autoscale.from_block({}), 10.0)
    # 1 active + 1 warm + 1 spare at $20/h for 730 h
    assert usd == pytest.approx(3 * 20 * 730)
    _formula_steps_evaluate(steps)


# ------------------------------------------------------------------ the assumed day
@pytest.mark.parametrize("peak, mean", [(20, 8), (20, 10), (100, 20), (30, 20), (100, 5)])
def test_cosine_day_mean_is_the_declared_mean(peak, mean):
    prof = be.daily_profile_rps(Traffic(peak, mean, 1, 1))
    assert prof.mean() == pytest.approx(mean, rel=1e-9)
    assert prof.max() == pytest.approx(peak, rel=1e-9)
    assert prof.min() >= 0


@settings(max_examples=40, deadline=None)
@given(peak=st.floats(0.5, 1e5), share=st.floats(0.05, 1.0))
def test_cosine_day_law(peak, share):
    mean = peak * share
    prof = be.daily_profile_rps(Traffic(peak, mean, 1, 1))
    assert prof.mean() == pytest.approx(mean, rel=1e-6)
    assert prof.min() >= 0


def test_hybrid_selfhost_only_includes_the_burst():
    # 30 req/s peak hour, X = 10, u = 0.5, burst 1.2: the fixed fleet is ceil(36 / 5) = 8
    hourly = np.array([10.0] * 12 + [30.0] * 12)
    split = be.hybrid_split(hourly, 10.0, 0.5, 5000.0, 1, 1000, 1e-3, burst_factor=1.2)
    assert split.selfhost_only_usd_per_month == pytest.approx((8 + 1) * 5000.0)


# ------------------------------------------------------------------ ownership
def test_owned_gpu_hour_worked_number():
    inputs = ownership.from_block({"capex_usd_per_node": 250_000})
    node, steps = ownership.node_hour(inputs, 8, 700.0)
    crf = 0.08 / (1 - 1.08**-5)
    assert crf == pytest.approx(0.250456, rel=1e-5)
    assert node.capital_usd_per_hour == pytest.approx(250_000 * crf / 8760)
    assert node.node_kw == pytest.approx(10.2)
    assert node.power_usd_per_hour == pytest.approx(10.2 * 1.58 * 0.08)
    assert node.colo_usd_per_hour == pytest.approx(10.2 * 184.06 / 730)
    # 7.1477 + 1.2893 + 2.5718 + 0.6849 = 11.6937 $/node-hour over 8 GPUs
    assert node.usd_per_gpu_hour == pytest.approx(1.4617, abs=1e-4)
    # the step that says "default" names each default's figure and source
    note = steps[-1].note
    assert "capex_usd_per_node" not in note
    for name in ("pue", "usd_per_kwh", "colo_usd_per_kw_month", "ops_usd_per_node_month"):
        assert f"{name} = " in note
    assert "Uptime Institute" in note and "CBRE" in note and "assumption" in note
    _formula_steps_evaluate(steps)


def test_every_default_carries_its_source():
    # given no block at all: every field is a default, and every default names its source
    for module in (coldstart, autoscale, ownership):
        inputs = module.from_block(None)
        sources = module.default_sources(inputs)
        assert set(sources) == set(module.FIELDS) - {"weights_gb_s"} | (
            {"weights_gb_s"} if module is coldstart else set()
        )
        for name, text in sources.items():
            # a URL or a named document, or it says it is ours
            assert any(w in text for w in ("http", "assumption", "design choice", "derived")), name
    for source, text in coldstart.WEIGHTS_GB_S_SOURCES.items():
        assert f"{coldstart.WEIGHTS_GB_S[source]:g} GB/s" in text


def test_tco_breakeven_and_months():
    node, _ = ownership.node_hour(ownership.from_block({"capex_usd_per_node": 250_000}), 8, 700)
    # 16 GPUs (2 nodes) at $2.50 rented, renting the plan costs $20,000/month, 1e10 tokens
    tco, steps = ownership.tco(node, 16, 2.5, 20_000.0, 1e10, 5.0)
    assert tco.nodes == 2
    assert tco.breakeven_utilization == pytest.approx(node.usd_per_gpu_hour / 2.5)  # 0.582
    # renting pays 20,000 / (2.5 * 16 * 730) = 68.5% of the owned GPU-hours: above break-even
    assert tco.utilization == pytest.approx(20_000 / 29_200)
    assert tco.owned_usd_per_month == pytest.approx(node.usd_per_hour * 2 * 730)
    assert tco.owned_usd_per_month < tco.rented_usd_per_month
    opex = (node.power_usd_per_hour + node.colo_usd_per_hour + node.ops_usd_per_hour) * 2 * 730
    assert tco.months_to_breakeven == pytest.approx(500_000 / (20_000 - opex))  # 37.2
    assert tco.owned_usd_per_mtok == pytest.approx(tco.owned_usd_per_month / 1e4)
    assert not any("below the break-even" in w for w in tco.renting_wins)
    assert any("GPU generation" in w for w in tco.renting_wins)
    _formula_steps_evaluate(steps)


def test_tco_renting_wins_below_breakeven():
    node, _ = ownership.node_hour(ownership.from_block({"capex_usd_per_node": 250_000}), 8, 700)
    tco, _ = ownership.tco(node, 16, 2.5, 10_000.0, 1e10, 5.0)  # 34% of the GPU-hours
    assert tco.owned_usd_per_month > tco.rented_usd_per_month
    assert any("below the break-even" in w for w in tco.renting_wins)


def test_tco_never_pays_back_when_renting_is_cheaper_than_opex():
    node, _ = ownership.node_hour(ownership.from_block({}), 8, 700)
    tco, _ = ownership.tco(node, 8, 2.5, 100.0, 1e9, 5.0)
    assert tco.months_to_breakeven is None
    assert any("does not pay back" in w for w in tco.renting_wins)


def test_zero_cost_of_capital_is_straight_line():
    assert ownership.capital_recovery_factor(0.0, 4) == 0.25


def test_usd_per_mtok_curve_falls_with_utilization():
    curve = ownership.usd_per_mtok_curve(np.array([0.25, 0.5, 1.0]), 8, 2000.0, 1.5, 2.5)
    # 8 x $2.50 = $20/h over 2,000 tok/s at full load = $2.78/M; at 50% twice that
    assert curve["rent"][2] == pytest.approx(20 / 3600 / 2000 * 1e6)
    assert curve["rent"][1] == pytest.approx(2 * curve["rent"][2])
    assert curve["own"][2] == pytest.approx(12 / 3600 / 2000 * 1e6)
    assert math.isfinite(curve["own"][0])


# ------------------------------------------------------------------ fixed fleet, warm pool
def _burst_policy(typed_warm=3, **autoscaling):
    from sizing.fleet import BurstWarmPool
    from sizing.specs import Policy

    burst = BurstWarmPool(coldstart.from_block(None), autoscale.from_block(autoscaling))
    return Policy(
        target_utilization=0.7,
        spare_replicas=1,
        burst_factor=1.2,
        warm_pool_replicas=typed_warm,
        burst_warm_pool=burst,
    )


def test_fixed_fleet_warm_pool_is_sized_from_the_burst():
    from sizing.fleet import breakeven, size_fleet
    from sizing.specs import ApiPrice

    # given peak 20 req/s x 1.2 burst, X = 1.5 req/s, TP2 at $2.50/GPU-hour, 17.64 GB per GPU
    # from NVMe: cold start 24 + 17.64 * 2 / 6.5 + 49 = 78.43 s; the default ramp
    # 20 * 0.2 / 60 = 0.0667 req/s per s -> warm = ceil(0.0667 * 78.43 / 1.5) = ceil(3.49) = 4
    traffic = Traffic(peak_rps=20.0, mean_rps=10.0, prompt_tokens_mean=1000, output_tokens_mean=300)
    policy = _burst_policy(typed_warm=3)
    fleet = size_fleet([1.5], 10.0, traffic, policy, 2, 2.5, True, [17.64])
    # then the warm pool is the burst's 4, not the typed 3: 23 serving + 1 spare + 4 = 28
    assert fleet.warm.from_burst and fleet.warm.replicas[0] == 4
    assert fleet.warm.cold_start_s[0] == pytest.approx(24 + 17.64 * 2 / 6.5 + 49)
    assert fleet.serving[0] == 23 and fleet.replicas[0] == 28
    assert fleet.usd_per_month[0] == pytest.approx(28 * 2 * 2.5 * 730)  # $102,200
    steps = fleet.steps(0)
    (warm,) = [s for s in steps if s.name == "warm_pool_replicas"]
    assert warm.value == 4 and "typed warm pool of 3 is not used" in warm.note
    _formula_steps_evaluate(steps)
    # the break-even's fixed replicas are the same spares + warm pool (one answer)
    _, bev_steps = breakeven(fleet, 0, ApiPrice(0.5, 1.5))
    (crossing,) = [s for s in bev_steps if s.name == "crossing_tokens_per_month"]
    assert {i.name: i.value for i in crossing.inputs}["s (spare + warm)"] == 5


def test_no_burst_keeps_the_typed_warm_pool():
    from sizing.fleet import size_fleet

    traffic = Traffic(peak_rps=20.0, mean_rps=10.0, prompt_tokens_mean=1000, output_tokens_mean=300)
    # a ramp of 0 states no burst (and a burst factor of 1 derives none)
    policy = _burst_policy(typed_warm=3, burst_ramp_rps_per_s=0.0)
    fleet = size_fleet([1.5], 10.0, traffic, policy, 2, 2.5, True, [17.64])
    assert not fleet.warm.from_burst and fleet.warm.replicas[0] == 3
    assert fleet.replicas[0] == 23 + 1 + 3
    assert not [s for s in fleet.steps(0) if s.name == "warm_pool_replicas"]
