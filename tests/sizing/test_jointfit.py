"""The joint fit's rule for which node constants are parameters (effective points)."""

from collections import namedtuple

import numpy as np
import pytest

from sizing import jointfit as jf

Point = namedtuple("Point", "generation precision engine engine_release x")


def test_effective_points_sum_the_squared_sensitivities():
    # 40 points at s = 0.12: 40 * 0.0144 = 0.576 of a point; a misfit (NaN) is worth nothing
    assert jf.effective_points(np.full(40, 0.12)) == pytest.approx(0.576)
    assert jf.effective_points(np.array([np.nan, 1.0, 0.5])) == pytest.approx(1.25)


def test_a_constant_is_a_parameter_from_two_effective_points():
    assert jf.MIN_EFFECTIVE_POINTS == 2.0
    assert not jf.measures(np.full(40, 0.12))  # 0.576 < 2
    assert jf.measures(np.full(8, 0.5))  # 8 * 0.25 = 2.0
    assert not jf.measures(np.full(3, 1e-4))  # nothing moves (max s < MIN_SENSITIVITY)


def _power_law(points, eta_mem_exponent=-1.0, link_exponent=-0.12):
    """A toy model: ``f_i = x_i * eta_mem^-1 * link_efficiency^-0.12`` (s = 1 and 0.12)."""
    x = np.array([p.x for p in points])

    def predict(calibrations):
        eta = np.array([c.eta_mem for c in calibrations])
        link = np.array([c.link_efficiency for c in calibrations])
        return x * eta**eta_mem_exponent * link**link_exponent

    return predict


def test_a_constant_the_points_barely_measure_stays_at_the_prior():
    # given 40 points that depend on eta_mem one for one and on the link at s = 0.12 only,
    # generated with eta_mem 0.5 and a link efficiency of 0.2 (the prior says 0.7)
    points = [Point("gen", "fp8", "vllm", "0.1", x) for x in np.linspace(1.0, 4.0, 40)]
    predict = _power_law(points)
    truth = [jf.dataclasses.replace(jf.PRIOR, eta_mem=0.5, link_efficiency=0.2)] * 40
    measured = predict(truth)
    # when fitted
    fit = jf.fit_joint(points, predict, np.zeros(40, dtype=np.int64), measured)
    # then the link (0.576 effective points) is no parameter of any node: it stays at the
    # prior, and eta_mem absorbs the difference, 0.5 * (0.2 / 0.7)^0.12 = 0.4302 (the prior
    # pulls it a little toward 0.8)
    assert all("link_efficiency" not in values for values in fit.values.values())
    assert fit.resolve("silicon:gen/fp8", "link_efficiency") == jf.PRIOR.link_efficiency
    assert fit.resolve("silicon:gen/fp8", "eta_mem") == pytest.approx(0.4302, rel=0.02)


def test_a_generation_without_points_reads_its_vendors_constants():
    # given 40 CDNA 4 points at eta_mem 0.35 (an AMD generation) and none on CDNA 3
    points = [Point("cdna4", "fp8", "sglang", "0.5", x) for x in np.linspace(1.0, 4.0, 40)]
    predict = _power_law(points)
    truth = [jf.dataclasses.replace(jf.PRIOR, eta_mem=0.35)] * 40
    fit = jf.fit_joint(points, predict, np.zeros(40, dtype=np.int64), predict(truth))
    # then the AMD vendor node is fitted, between the data and the generic prior (0.80: the
    # prior pulls each of vendor, generation and precision a little toward its parent), and
    # CDNA 3 reads it
    assert jf.node_chain("silicon:cdna3/fp8") == [
        "silicon:cdna3/fp8",
        "silicon:cdna3",
        "silicon:amd",
    ]
    assert fit.has("silicon:amd")
    amd = fit.resolve("silicon:amd", "eta_mem")
    assert 0.35 < amd < 0.65
    assert fit.resolve("silicon:cdna4/fp8", "eta_mem") == pytest.approx(0.35, rel=0.02)
    assert fit.calibration("cdna3", "fp8", "sglang", "0.5").eta_mem == amd
    # and an NVIDIA generation does not borrow AMD's value
    assert fit.calibration("hopper", "fp8", "sglang", "0.5").eta_mem == jf.PRIOR.eta_mem
    # a generation the table does not know has no vendor: its parent is the prior
    assert jf.node_chain("silicon:gen") == ["silicon:gen"]


def test_tensorrt_llm_before_1_0_is_its_own_engine_family():
    # TensorRT engines behind a C++ executor until 1.0, the PyTorch backend from 1.0 on
    assert jf.engine_nodes("trtllm", "0.14") == (
        "engine:trtllm-tensorrt",
        "engine:trtllm-tensorrt/0.14",
    )
    assert jf.engine_nodes("trtllm", "1.0") == ("engine:trtllm", "engine:trtllm/1.0")
    assert jf.engine_nodes("trtllm", "") == ("engine:trtllm", "engine:trtllm/unversioned")
    assert jf.engine_nodes("sglang", "0.4.6") == ("engine:sglang", "engine:sglang/0.4.6")
    assert jf.node_chain("engine:trtllm-tensorrt/0.14") == [
        "engine:trtllm-tensorrt/0.14",
        "engine:trtllm-tensorrt",
    ]


def test_the_gate_judges_a_front_end_at_a_typical_size_not_the_prior():
    # given 40 TTFTs of 20-100 ms of prefill behind a 120 ms front end
    points = [Point("gen", "fp8", "sglang", "0.5", x) for x in np.linspace(0.02, 0.1, 40)]
    x = np.array([p.x for p in points])

    def predict(calibrations):
        return x + np.array([c.frontend_latency_s for c in calibrations])

    truth = [jf.dataclasses.replace(jf.PRIOR, frontend_latency_s=0.12)] * 40
    # at the 10 ms prior they would be worth 1.2 points for the front end, at 30 ms 5.6
    assert jf.effective_points(0.01 / (x + 0.01)) == pytest.approx(1.24, abs=0.01)
    assert jf.effective_points(0.03 / (x + 0.03)) == pytest.approx(5.61, abs=0.01)
    # when fitted, then the front end is a parameter and comes out at the truth
    fit = jf.fit_joint(points, predict, np.zeros(40, dtype=np.int64), predict(truth))
    assert fit.resolve("engine:sglang/0.5", "frontend_latency_s") == pytest.approx(0.12, rel=0.05)


def test_the_gate_judges_the_per_sequence_cost_at_10_us_not_its_2_us_prior():
    # given 20 offline steps of 8 ms of weights and compute at batches of 200-1,000 sequences,
    # each sequence costing 5 us of host time
    batch = np.linspace(200.0, 1000.0, 20)
    points = [Point("gen", "fp8", "trtllm", "0.20", b) for b in batch]

    def predict(calibrations):
        return 0.008 + batch * np.array([c.step_overhead_per_seq_s for c in calibrations])

    truth = [jf.dataclasses.replace(jf.PRIOR, step_overhead_per_seq_s=5e-6)] * 20
    # at the 2 us prior they would be worth 0.37 of a point, at the 10 us gate 3.59
    assert jf.PRIOR.step_overhead_per_seq_s == 2e-6
    assert jf.GATE_VALUES["step_overhead_per_seq_s"] == 1e-5
    assert jf.effective_points(2e-6 * batch / (0.008 + 2e-6 * batch)) == pytest.approx(
        0.37, abs=0.01
    )
    assert jf.effective_points(1e-5 * batch / (0.008 + 1e-5 * batch)) == pytest.approx(
        3.59, abs=0.01
    )
    # when fitted, then it is a parameter of the engine and comes out nearer the truth than
    # the prior (4.1 us: 20 points, each weighing 1/sqrt(20), against the prior's pull)
    fit = jf.fit_joint(points, predict, np.zeros(20, dtype=np.int64), predict(truth))
    assert "step_overhead_per_seq_s" in fit.values["engine:trtllm-tensorrt"]
    value = fit.resolve("engine:trtllm-tensorrt/0.20", "step_overhead_per_seq_s")
    assert 3.5e-6 < value < 5e-6
