"""Hierarchical joint fit: silicon constants per generation x precision, engine constants per
engine family x release, fitted together over all measured points.

Why joint
---------
A constant belongs to what causes it. Achieved HBM bandwidth, FLOP efficiency and link
efficiency belong to the silicon (H100 and H200 share the GH100 die, B200/B300/GB200 share
Blackwell), and to the kernels of a weight precision on it; per-step host overhead
(``a + b x layers + c x MoE layers``, and a MoE layer's eager cost on prompt steps), all-reduce
latency, front-end latency and how coherent closed-loop waves stay belong to the serving
engine and its release. Each measured point is predicted with
``compose(silicon node of its generation x precision, engine node of its family x release)``,
so a GPU with few points borrows strength from its generation, and a new release from its
family, instead of borrowing another engine's whole profile. Two GPUs of one generation get
the same constants, so the datasheet alone orders them (monotonic physics).

Nodes and priors
----------------
``silicon:<vendor>`` -> ``silicon:<gen>`` -> ``silicon:<gen>/<precision>``; ``engine:<family>`` ->
``engine:<family>/<release>``, where TensorRT-LLM releases before 1.0 form their own family
``trtllm-tensorrt`` (``engine_family_node``: compiled TensorRT engines behind a C++ executor,
7 ms of front end in the shipped fit, against the PyTorch backend's Python scheduler and
~70 ms from 1.0 on; as one family, a fold holding out the 0.x tables predicted their TTFTs
with 1.x's front end, x2.8). Every node holds log values of its constants; residuals:

- data: ``w_m * log(f_i / y_i)``, ``w_m = 1 / sqrt(n_m)`` (each metric weighs the same);
- prior: ``(log theta_node - log theta_parent) / (sigma * sqrt(N))``, the parent of a top
  node being the physics prior ``PRIOR``; ``sigma`` is ``ROOT_SIGMA_LOG`` for vendor,
  generation and family nodes (weak) and ``LEAF_SIGMA_LOG`` for leaves (a release or
  precision moves its family's constant by ~1.5-2x before it costs as much as one bad point).

The vendor level (``VENDOR_OF_GENERATION``) matters where a generation has no points of its
own, e.g. when a cross-validation fold holds out the only source of MI300X/MI325X (CDNA 3):
the generation then reads AMD's constants, fitted on CDNA 4, instead of the generic prior
(held out by source, TTFT 42.1 -> 40.3 %).

A node constant is a parameter only when the points under it *measure* it: with
``s_i = |d log f_i / d log theta|`` at the prior (front end below), the node needs ``max_i s_i >=
MIN_SENSITIVITY`` and ``n_eff = sum_i s_i^2 >= MIN_EFFECTIVE_POINTS`` (``n_eff`` counts
points as if each depended on the constant one for one: 40 TPOT points at ``s ~ 0.12`` are
0.6 of a point). Otherwise it resolves to its parent's value. Why: a constant the node's
points barely move absorbs whatever the model misses there, and ends wherever that pushes
it; another metric that depends on it strongly then inherits the drift. Holding out the
InferenceX capture (183 of the 192 TTFT points) left MI355X with TPOT-only points
(``n_eff`` 0.6 for link efficiency): the fit took the link to its 0.1 bound and the
held-out TTFTs came out 5-7x the measured ones. The sensitivities are judged with the
front end at ``FRONTEND_GATE_S`` (30 ms), not the prior's 10 ms: TTFTs of a few hundred ms
barely move with a 10 ms front end, so at the prior no engine's points could measure one of
60-130 ms (SGLang's, measured 150-160 ms TTFTs of 900-token prompts at one client on 8x B200
where the prefill is ~50 ms); the gap then went to slower prefill communication (Hopper link
0.41, against 0.49 with the front end fitted). A MoE layer's host cost on prompt steps is
judged the same way, at ``PROMPT_MOE_GATE_S`` (1 ms) and alone, the others at their priors:
judged together, a 1 ms MoE-layer cost inflates every MoE prediction and so shrinks every
other constant's share of it (vLLM's points, mostly MoE, then measured none of its constants).

Why the MoE terms: a lone prompt of ~230 tokens measured 27 ms on SGLang and 45 ms on
TensorRT-LLM 1.2 for Qwen3-8B on one H100 (GPUStack), against 150-160 ms for ~900 tokens of
DeepSeek-R1 on 8x B200 at one client (InferenceX). With one front end per engine the fit put
60-70 ms into it, and a small dense model's TTFT came out 2-3x too slow; a cost per MoE
layer of a prompt step (run eagerly: router, permutes and expert launches on the host) lets
the DeepSeek runs carry it (SGLang ~0.7 ms per layer, front end ~20 ms). The decode-step
counterpart moves MoE models' TPOT at a few clients, which a per-layer cost shared with
dense models could only fit by making small dense models ~25 % too slow.

Bounds (``CONSTANT_BOUNDS``) are physical; a free constant that ends within 1 % of one is a
*bound hit*, reported per node (``JointFit.bound_hits``) and carried into the quality of every
profile that uses the node.

The Jacobian is sparse (a point depends on two leaves and their parents), so
``scipy.optimize.least_squares`` gets ``jac_sparsity`` and perturbs unrelated nodes together.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares
from scipy.sparse import lil_matrix

from sizing.specs import Calibration

SILICON_CONSTANTS = ("eta_mem", "eta_flop_decode", "eta_flop_prefill", "link_efficiency")
ENGINE_CONSTANTS = (
    "step_overhead_s",
    "step_overhead_per_layer_s",
    "step_overhead_per_seq_s",
    "step_overhead_per_moe_layer_s",
    "prompt_overhead_per_moe_layer_s",
    "allreduce_latency_s",
    "frontend_latency_s",
    "prefill_wave_fraction",
)
FITTED_CONSTANTS = SILICON_CONSTANTS + ENGINE_CONSTANTS

# Physical ranges: no kernel beats the datasheet (eta <= 0.95) and none streams HBM below 30 %
# of peak in steady decode; host overhead from 0.1 ms (CUDA graphs) to 30 ms per step plus
# 1-500 us per layer; front-end latency up to 1 s (tokenizer + HTTP + admission).
CONSTANT_BOUNDS: dict[str, tuple[float, float]] = {
    "eta_mem": (0.30, 0.95),
    "eta_flop_decode": (0.10, 0.95),
    "eta_flop_prefill": (0.10, 0.95),
    "link_efficiency": (0.10, 0.95),
    "step_overhead_s": (1e-4, 0.03),
    "step_overhead_per_layer_s": (1e-6, 5e-4),
    "step_overhead_per_seq_s": (1e-7, 2e-4),
    "step_overhead_per_moe_layer_s": (1e-6, 1e-3),
    "prompt_overhead_per_moe_layer_s": (1e-6, 5e-3),
    "allreduce_latency_s": (1e-6, 1e-4),
    "frontend_latency_s": (1e-4, 1.0),
    "prefill_wave_fraction": (0.01, 1.0),
}

#: The physics prior every node is pulled toward: datasheet-relative efficiencies typical of
#: tuned kernels, ~0.7 ms + 30 us/layer host overhead (a 32-layer 8B step ~1.7 ms, an
#: 80-layer 70B step ~3.1 ms; the engines whose points measure it fit 0.47-0.76 ms, where
#: 1.5 ms left an 8B decode step ~1 ms slower than measured on the engines whose points do
#: not), 30 us more per MoE layer, 10 ms front end. The two closed-loop TTFT constants take
#: the typical value of the engine families whose points measure them (geometric mean of
#: those family nodes in the shipped fit, rounded), so a family that does not measure them
#: starts where the measured ones sit, not at a guess: a MoE layer's eager prompt-step cost
#: 0.4 ms (fitted 0.13 ms TensorRT-LLM 0.x, 0.27 ms ATOM, 0.82 ms TensorRT-LLM 1.x, 0.86 ms
#: SGLang: 0.39 ms), waves 0.1 coherent (fitted 0.08 ATOM, 0.10 SGLang, 0.10 TensorRT-LLM
#: 1.x; the closed-loop simulator's median sits at ~0, tests/sizing/test_closed_loop_protocol.py).
#: The guesses they replace, 0.1 ms and "half coherent" (0.5), held a family without such
#: points (DeepSeek held out: SGLang keeps none) 0.74x too fast at a few clients and 1.2-1.5x
#: too slow beyond.
#:
#: The cost per running sequence per step is 2 us, from a measurement outside our data: one
#: host pass over the running sequences (vLLM V1's ``Scheduler.update_from_output``) takes
#: 0.142 ms at 128 and 0.287 ms at 256 decoding sequences, 1.1 us each
#: (vllm-project/vllm#46112, its micro-benchmark), and a step makes about two such passes
#: (schedule the batch, then read its results). Only offline rows at batches of hundreds
#: measure this constant, and all of them are TensorRT-LLM's (fitted 1.1-2.4 us; 3-6 us under
#: the old prior's pull), so a family without them, and every fold that holds them out, runs
#: at the prior. The 10 us it replaces had no source; it made every such sequence 8 us slower
#: per step, and held out by source (TensorRT-LLM's perf-overview out, so no offline row is
#: left to fit) it predicted the largest batches' max throughput 8-21 % too slow (H100 and
#: H200 at TP4 and TP8, H100 at TP1; README, "Stop 49").
PRIOR = Calibration(
    name="physics defaults",
    eta_mem=0.80,
    eta_flop_decode=0.60,
    eta_flop_prefill=0.55,
    link_efficiency=0.70,
    step_overhead_s=0.7e-3,
    step_overhead_per_layer_s=3e-5,
    step_overhead_per_seq_s=2e-6,
    step_overhead_per_moe_layer_s=3e-5,
    prompt_overhead_per_moe_layer_s=4e-4,
    allreduce_latency_s=8e-6,
    frontend_latency_s=0.010,
    prefill_wave_fraction=0.1,
)
ROOT_SIGMA_LOG = math.log(4.0)
LEAF_SIGMA_LOG = math.log(1.6)
MIN_SENSITIVITY = 1e-3
#: The front end the sensitivity gate judges at: TTFTs of a few hundred ms barely move with
#: a 10 ms front end, so at the prior no engine's points would ever measure one of 100 ms.
FRONTEND_GATE_S = 0.030
#: A MoE layer's eager host cost on prompt steps is judged at 1 ms, not its 0.1 ms prior, which
#: moves a lone DeepSeek-R1 TTFT by 4 % where measured gaps of 50-100 ms call for ~1 ms per
#: layer (judged alone: the other constants keep the prior's, see ``fit_joint``)
PROMPT_MOE_GATE_S = 1e-3
#: The fixed step overhead is judged at 1.5 ms, a typical engine's, not the 0.7 ms prior: a
#: prior half as large halves every point's sensitivity and quarters ``n_eff``, and would hold
#: every engine at the prior whatever its points say
STEP_OVERHEAD_GATE_S = 1.5e-3
#: The cost per running sequence is judged at 10 us, not its 2 us prior: at the prior the
#: offline rows' sensitivities fall 5x and ``n_eff`` 25x, and no engine's points would
#: measure it (the TensorRT-LLM families, which do at 10 us, fit 1.1-2.4 us)
PER_SEQ_GATE_S = 1e-5
GATE_VALUES = {
    "prompt_overhead_per_moe_layer_s": PROMPT_MOE_GATE_S,
    "step_overhead_s": STEP_OVERHEAD_GATE_S,
    "step_overhead_per_seq_s": PER_SEQ_GATE_S,
}
MIN_EFFECTIVE_POINTS = 2.0  # see the module docstring; 2-5 give the same CV errors, 1 not
BOUND_TOLERANCE_LOG = 0.01


def silicon_nodes(generation: str, precision: str) -> tuple[str, str]:
    """(top, leaf) silicon node names of a generation x weight precision."""
    top = f"silicon:{generation or 'unknown'}"
    return top, f"{top}/{precision or 'unknown'}"


#: TensorRT-LLM ships two runtimes: compiled TensorRT engines behind a C++ executor (the
#: default before 1.0) and the PyTorch backend with a Python scheduler (the default from 1.0
#: on, "PyTorch backend as default" in the 1.0 release notes). Their host overhead and front
#: end are not one engine's, so the fit treats releases before 1.0 as their own family.
TRTLLM_PYTORCH_DEFAULT_FROM = (1, 0)


def release_order(release: str) -> tuple[int, ...]:
    """Sort key of a release string: numeric parts, '' (unversioned) first."""
    return tuple(int(part) for part in re.findall(r"\d+", release)) if release else ()


def engine_family_node(family: str, release: str) -> str:
    """The engine family a release's constants belong to: its family, except TensorRT-LLM
    releases before 1.0 (TensorRT-engine runtime), ``trtllm-tensorrt``; a release not
    stated is read as the current runtime."""
    numbers = release_order(release or "")
    if family == "trtllm" and numbers and numbers < TRTLLM_PYTORCH_DEFAULT_FROM:
        return "trtllm-tensorrt"
    return family or "unknown"


def engine_nodes(family: str, release: str) -> tuple[str, str]:
    """(top, leaf) engine node names of a family x release ('' = release not stated)."""
    top = f"engine:{engine_family_node(family, release)}"
    return top, f"{top}/{release or 'unversioned'}"


#: Generations of one vendor share its kernels and compilers (CUDA or ROCm), so a generation
#: without points of its own starts from its vendor's constants, not the generic prior.
VENDOR_OF_GENERATION = {
    "ampere": "nvidia",
    "ada": "nvidia",
    "hopper": "nvidia",
    "blackwell": "nvidia",
    "cdna3": "amd",
    "cdna4": "amd",
}


def _parent(node: str) -> str:
    """The node a node's constants fall back to: precision -> generation -> vendor -> prior,
    release -> engine family -> prior."""
    if "/" in node:
        return node.rsplit("/", 1)[0]
    vendor = VENDOR_OF_GENERATION.get(node.removeprefix("silicon:"), "")
    return f"silicon:{vendor}" if node.startswith("silicon:") and vendor else ""


def node_chain(node: str) -> list[str]:
    """``node`` and its ancestors, nearest first."""
    out = []
    while node:
        out.append(node)
        node = _parent(node)
    return out


def _constants_of(node: str) -> tuple[str, ...]:
    return SILICON_CONSTANTS if node.startswith("silicon:") else ENGINE_CONSTANTS


@dataclass(frozen=True)
class JointFit:
    """Fitted node constants (natural units), which of them were free, and bound hits."""

    values: dict[str, dict[str, float]]  # node -> constant -> value (free ones only)
    n_points: dict[str, int]  # node -> points under it
    bound_hits: dict[str, tuple[str, ...]]  # node -> constants that ended at a bound
    cost: float = 0.0
    n_params: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def resolve(self, node: str, name: str) -> float:
        """A node's constant, or its parent's, or the prior's (the fallback chain)."""
        while node:
            if name in self.values.get(node, {}):
                return self.values[node][name]
            node = _parent(node)
        return getattr(PRIOR, name)

    def has(self, node: str) -> bool:
        return node in self.n_points

    def calibration(
        self, generation: str, precision: str, family: str, release: str, name: str = ""
    ) -> Calibration:
        """Composed constants for one deployment: the deepest fitted node on each side."""
        s_top, s_leaf = silicon_nodes(generation, precision)
        e_top, e_leaf = engine_nodes(family, release)
        s_node = s_leaf if self.has(s_leaf) else s_top
        e_node = e_leaf if self.has(e_leaf) else e_top
        values = {k: self.resolve(s_node, k) for k in SILICON_CONSTANTS}
        values |= {k: self.resolve(e_node, k) for k in ENGINE_CONSTANTS}
        return dataclasses.replace(PRIOR, name=name or PRIOR.name, **values)

    def hits_for(self, generation: str, precision: str, family: str, release: str) -> list[str]:
        """Bound hits of every node a composed calibration reads ('node: constant')."""
        nodes = node_chain(silicon_nodes(generation, precision)[1])
        nodes += node_chain(engine_nodes(family, release)[1])
        return [f"{node}: {name}" for node in nodes for name in self.bound_hits.get(node, ())]


def effective_points(sensitivity: np.ndarray) -> float:
    """How many points a set of points is worth for one constant: ``n_eff = sum_i s_i^2``,
    ``s_i = |d log f_i / d log theta|`` (NaN: a misfit point, worth nothing). One point
    whose prediction scales one for one with the constant is worth 1; 40 at s = 0.12, 0.576.
    """
    s = np.asarray(sensitivity, dtype=np.float64)
    return float(np.nansum(s * s))


def measures(sensitivity: np.ndarray) -> bool:
    """Whether points with these sensitivities make a constant a parameter of their node:
    some point moves (``max s >= MIN_SENSITIVITY``) and together they are worth
    ``MIN_EFFECTIVE_POINTS`` (module docstring)."""
    s = np.asarray(sensitivity, dtype=np.float64)
    moved = np.nanmax(s, initial=0.0) >= MIN_SENSITIVITY
    return bool(moved and effective_points(s) >= MIN_EFFECTIVE_POINTS)


def _point_nodes(p) -> tuple[str, ...]:
    """Every node a point's prediction reads: its silicon leaf and engine leaf first, then
    their ancestors."""
    s_leaf = silicon_nodes(p.generation, p.precision)[1]
    e_leaf = engine_nodes(p.engine, p.engine_release)[1]
    s_chain, e_chain = node_chain(s_leaf), node_chain(e_leaf)
    return (s_leaf, e_leaf, *s_chain[1:], *e_chain[1:])


def fit_joint(
    points: Sequence,
    predict,
    metric_index: np.ndarray,
    measured: np.ndarray,
    start: JointFit | None = None,
    max_nfev: int = 60,
) -> JointFit:
    """Fit all node constants to ``points`` at once.

    Parameters
    ----------
    points : FitPoint-like (generation, precision, engine, engine_release)
    predict : callable(list of Calibration, one per point) -> predicted values (NaN: misfit)
    metric_index, measured : per point, the metric's index and the measured value
    start : a previous fit to start from (cross-validation folds start at the full fit)
    """
    n = len(points)
    nodes_of = [_point_nodes(p) for p in points]
    members: dict[str, list[int]] = defaultdict(list)
    for i, nodes in enumerate(nodes_of):
        for node in nodes:
            members[node].append(i)

    # judged at a typical front end, not the prior's (see FRONTEND_GATE_S); a MoE layer's
    # prompt-step cost at its own typical value, which only its own judgement sees (at 1 ms
    # per layer a MoE model's every prediction grows, and every other constant's share of it
    # would shrink: vLLM's points, mostly MoE, then measured none of its constants)
    judged = dataclasses.replace(PRIOR, frontend_latency_s=FRONTEND_GATE_S)
    reference = np.log(predict([judged] * n))
    sensitivity = {}
    for name in FITTED_CONSTANTS:
        at = dataclasses.replace(judged, **{name: GATE_VALUES.get(name, getattr(judged, name))})
        base = reference if at == judged else np.log(predict([at] * n))
        moved = dataclasses.replace(at, **{name: getattr(at, name) * math.exp(0.05)})
        sensitivity[name] = np.abs(np.log(predict([moved] * n)) - base) / 0.05
    usable = np.isfinite(reference) & (measured > 0)

    params: list[tuple[str, str]] = []  # (node, constant)
    for node in sorted(members):
        rows = [i for i in members[node] if usable[i]]
        for name in _constants_of(node):
            if rows and measures(sensitivity[name][rows]):
                params.append((node, name))
    index = {key: k for k, key in enumerate(params)}

    def value_of(theta: np.ndarray, node: str, name: str) -> float:
        while node:
            k = index.get((node, name))
            if k is not None:
                return math.exp(theta[k])
            node = _parent(node)
        return getattr(PRIOR, name)

    def calibrations(theta: np.ndarray) -> list[Calibration]:
        cache: dict[tuple[str, str], Calibration] = {}
        out = []
        for s_leaf, e_leaf, *_ancestors in nodes_of:
            key = (s_leaf, e_leaf)
            if key not in cache:
                values = {k: value_of(theta, s_leaf, k) for k in SILICON_CONSTANTS}
                values |= {k: value_of(theta, e_leaf, k) for k in ENGINE_CONSTANTS}
                cache[key] = dataclasses.replace(PRIOR, **values)
            out.append(cache[key])
        return out

    counts = np.bincount(metric_index[usable], minlength=int(metric_index.max(initial=0)) + 1)
    weights = np.where(usable, 1.0 / np.sqrt(np.maximum(counts[metric_index], 1)), 0.0)
    n_used = max(int(usable.sum()), 1)
    prior_scale = {
        key: 1.0 / ((LEAF_SIGMA_LOG if "/" in key[0] else ROOT_SIGMA_LOG) * math.sqrt(n_used))
        for key in params
    }
    log_measured = np.log(np.where(measured > 0, measured, 1.0))

    def residuals(theta: np.ndarray) -> np.ndarray:
        predicted = predict(calibrations(theta))
        safe = np.where(np.isfinite(predicted) & (predicted > 0), predicted, 1e-30)
        data = np.where(usable, weights * (np.log(safe) - log_measured), 0.0)
        prior = [
            prior_scale[(node, name)] * (theta[k] - math.log(value_of(theta, _parent(node), name)))
            for k, (node, name) in enumerate(params)
        ]
        return np.concatenate([data, np.array(prior)])

    if not params:
        return JointFit({}, {k: len(v) for k, v in members.items()}, {}, 0.0, 0)
    sparsity = lil_matrix((n + len(params), len(params)), dtype=int)
    for i, nodes in enumerate(nodes_of):
        for node in nodes:
            for name in _constants_of(node):
                k = index.get((node, name))
                if k is not None:
                    sparsity[i, k] = 1
    for k, (node, name) in enumerate(params):
        sparsity[n + k, k] = 1
        parent_k = index.get((_parent(node), name))
        if parent_k is not None:
            sparsity[n + k, parent_k] = 1

    low = np.log([CONSTANT_BOUNDS[name][0] for _, name in params])
    high = np.log([CONSTANT_BOUNDS[name][1] for _, name in params])
    theta0 = np.array(
        [
            math.log(start.resolve(node, name) if start else getattr(PRIOR, name))
            for node, name in params
        ]
    )
    theta0 = np.clip(theta0, low + 1e-3, high - 1e-3)
    solution = least_squares(
        residuals, theta0, bounds=(low, high), jac_sparsity=sparsity, method="trf",
        tr_solver="lsmr", loss="soft_l1", f_scale=0.1, diff_step=1e-3, max_nfev=max_nfev,
        x_scale="jac",
    )  # fmt: skip
    values: dict[str, dict[str, float]] = defaultdict(dict)
    hits: dict[str, list[str]] = defaultdict(list)
    for k, (node, name) in enumerate(params):
        values[node][name] = float(math.exp(solution.x[k]))
        at_low = solution.x[k] - low[k] < BOUND_TOLERANCE_LOG
        at_high = high[k] - solution.x[k] < BOUND_TOLERANCE_LOG
        if at_low or at_high:
            hits[node].append(f"{name} at its {'lower' if at_low else 'upper'} bound")
    return JointFit(
        values=dict(values),
        n_points={k: len(v) for k, v in members.items()},
        bound_hits={k: tuple(v) for k, v in hits.items()},
        cost=float(solution.cost),
        n_params=len(params),
    )
