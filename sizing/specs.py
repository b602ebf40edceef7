"""Frozen input dataclasses of the sizing core.

The core never touches the database: the Django layer (``planner.selectors``) maps catalog rows
to these plain objects. All sizes are in base SI units unless a name says otherwise
(``_gb`` = 1e9 bytes, ``_tb_s`` = 1e12 bytes/s, ``_tflops`` = 1e12 FLOP/s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Bytes per stored element, by precision name. int4/fp4 carry block-scale overhead on top
#: (see ``WEIGHT_SCALE_OVERHEAD``).
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
    "mxfp4": 0.5,
}

#: Extra bytes per weight for block-scaled 4-bit formats: int4 (AWQ/GPTQ, group 128, one fp16
#: scale + zero per group = 4 B / 128 weights), fp4 (NVFP4: one fp8 scale per 16 weights =
#: 1 B / 16), mxfp4 (OCP Microscaling spec v1.0: one 8-bit E8M0 scale per 32 = 1 B / 32).
WEIGHT_SCALE_OVERHEAD: dict[str, float] = {"int4": 4.0 / 128, "fp4": 1.0 / 16, "mxfp4": 1.0 / 32}

#: Aliases accepted on input, mapped to the canonical precision names above.
PRECISION_ALIASES: dict[str, str] = {
    "nvfp4": "fp4",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "w4a16": "int4",
    "awq": "int4",
    "gptq": "int4",
}


def canonical_precision(name: str) -> str:
    """Return the canonical precision name for ``name`` (case-insensitive), or raise ValueError."""
    key = name.strip().lower()
    key = PRECISION_ALIASES.get(key, key)
    if key not in BYTES_PER_ELEMENT:
        known = ", ".join(sorted(set(BYTES_PER_ELEMENT) | set(PRECISION_ALIASES)))
        raise ValueError(f"unknown precision {name!r}; known: {known}")
    return key


@dataclass(frozen=True)
class GpuSpec:
    """One GPU SKU.

    ``dense_tflops`` maps a compute precision (bf16, fp8, fp4, int8) to its dense peak in
    TFLOP/s (TOPS for int8); a precision missing there falls back to the next wider one the
    GPU has (fp4 -> fp8 -> bf16), since the engine then computes in that wider type.
    """

    name: str
    memory_gb: float
    hbm_bandwidth_tb_s: float
    dense_tflops: dict[str, float]
    scale_up_link: str  # "nvlink", "infinity_fabric", "pcie"
    scale_up_bw_gb_s: float  # bidirectional per GPU
    gpus_per_node: int
    scale_up_domain_gpus: int  # GPUs reachable on the scale-up link (NVL72: 72)
    usd_per_gpu_hour: float = 0.0
    #: One-way bandwidth per GPU off the scale-up domain (a 400 Gb/s NIC per GPU is 50 GB/s);
    #: used for pipeline hops and expert all-to-alls that leave the NVLink/xGMI domain.
    scale_out_gb_s: float = 50.0
    #: Who makes it ("NVIDIA", "AMD"; blank: not said). An engine runs another kernel stack
    #: on each vendor's GPUs (CUDA or ROCm builds), and its disaggregated fit follows that
    #: build (``sizing.disagg.engine_build``).
    vendor: str = ""


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, as the sizing chain needs it.

    Attention layout
    ----------------
    - GQA/MHA: ``num_kv_heads`` heads of ``head_dim`` for K and for V.
    - MLA (``kv_lora_rank > 0``): one latent of ``kv_lora_rank + qk_rope_head_dim`` per token
      per layer, shared by all heads (replicated on every TP rank).
    - Layer mix: ``full_attention_layers + sliding_window_layers + linear_attention_layers ==
      num_layers``. A sliding (or chunked-local) layer holds at most ``sliding_window`` tokens;
      a linear-attention layer holds a constant ``linear_state_elements`` per sequence.

    Parameters
    ----------
    total_params, active_params : float
        Whole model and per-token active count (MoE: non-expert + top-k routed + shared).
    embedding_params : float
        The input embedding table alone: resident in memory but only B rows of it are read per
        decode step, so it is excluded from the bytes a step streams.
    params_per_expert : float
        One routed expert of one MoE layer (gate, up and down projections).
    num_moe_layers : int
        Layers that hold routed experts (DeepSeek's first dense layers and Llama 4 Maverick's
        interleaving make this smaller than ``num_layers``).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    total_params: float
    active_params: float
    embedding_params: float = 0.0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    full_attention_layers: int = -1  # -1: all layers are full attention
    sliding_window_layers: int = 0
    sliding_window: int = 0
    linear_attention_layers: int = 0
    linear_state_elements: int = 0  # per layer per sequence
    num_experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    params_per_expert: float = 0.0
    num_moe_layers: int = 0
    max_context: int = 131072
    #: Input embedding shared with the LM head: then the table *is* read every decode step.
    tie_word_embeddings: bool = False
    #: Vision-language models (``sizing.vision``, from the config's ``vision_config``): the
    #: encoder's params, its patch side (px), patches merged into one token, and a fixed
    #: tokens-per-image count when the config states one (0: derive from tiles)
    vision_params: float = 0.0
    vision_patch_size: int = 0
    vision_merge: int = 1
    vision_tokens_per_image: int = 0
    #: The routed experts' precision in the published checkpoint when only they are quantized
    #: (gpt-oss: MXFP4 experts, bf16 attention and embeddings, per its config.json
    #: ``quantization_config``); '' for a checkpoint stored at one precision.
    checkpoint_expert_precision: str = ""

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def n_full_layers(self) -> int:
        if self.full_attention_layers >= 0:
            return self.full_attention_layers
        return self.num_layers - self.sliding_window_layers - self.linear_attention_layers


@dataclass(frozen=True)
class Parallelism:
    """Degrees of parallelism inside one serving instance (a replica).

    ``dp`` is data parallelism inside the instance (for MoE: attention data-parallel with the
    experts spread over ``ep``); GPUs per replica = tp * pp * dp.
    """

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


#: Modules a LoRA adapter may target (Hugging Face PEFT names of a Llama-style block).
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_module_mask(modules) -> float:
    """Bit mask of target module names (bit j = ``LORA_MODULES[j]``)."""
    return float(sum(1 << LORA_MODULES.index(m) for m in set(modules) if m in LORA_MODULES))


def tokens_per_verify_step(acceptance: float, k: int, by_position: tuple = ()) -> float:
    """Expected tokens one speculative verify step emits per sequence:
    ``(1 - a^(k+1)) / (1 - a)`` for a per-position acceptance a (the accepted run of drafts
    plus the target's own token), or ``1 + sum_j prod_{i<=j} a_i`` for per-position values.
    a = 0.7, k = 4: 2.77 tokens; k = 0: 1 (plain decode)."""
    if k <= 0:
        return 1.0
    if by_position:
        total, run = 1.0, 1.0
        for a in by_position[:k]:
            run *= a
            total += run
        return total
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


@dataclass(frozen=True)
class EngineSettings:
    """Serving-engine knobs that change memory and step time (vLLM names where they exist)."""

    engine: str = "vllm"
    gpu_memory_utilization: float = 0.90
    max_num_batched_tokens: int = 8192  # chunked-prefill token budget per step
    max_num_seqs: int = 1024
    block_size: int = 16
    runtime_overhead_gb: float = 2.0  # CUDA context, CUDA graphs, NCCL buffers, per GPU
    #: Activation workspace per prefill-budget token per unit of hidden size (bytes): about 12
    #: hidden-wide bf16 tensors alive at the peak of a layer (residual, normed input, q/k/v,
    #: attention output, the MLP's gate/up/activation at ~3.5x hidden) -> 24 B. See memory.py.
    workspace_bytes_per_token_hidden: float = 24.0
    #: Longest request the engine admits (tokens); 0: the model's maximum context. When set,
    #: one sequence of this length must fit the KV budget (vLLM refuses to start otherwise).
    max_model_len: int = 0
    #: SGLang's ``--scheduler-recv-interval`` k: the scheduler polls for new requests once
    #: every k decode steps (a step carrying prompt tokens, or an idle engine, polls at once),
    #: so a request arriving while others decode waits ``(k - 1) / 2`` steps before it is
    #: received. 1 (every step) is every engine's default.
    scheduler_recv_interval: int = 1
    # Speculative decoding (sizing.speculative): "" off, or "draft" (a small model), "eagle" /
    # "mtp" (a head on the target). ``spec_tokens`` k drafted per step; ``spec_acceptance`` the
    # per-position acceptance a (or ``spec_acceptance_by_position``, one value per position).
    spec_method: str = ""
    spec_tokens: int = 0
    spec_acceptance: float = 0.0
    spec_acceptance_by_position: tuple[float, ...] = ()
    #: the draft's weights (a draft model's total params, or the head's); its active params
    #: per token (MoE drafts), its layers (0: a head, one target layer of KV) and its KV
    #: elements per token over all its layers
    spec_draft_params: float = 0.0
    spec_draft_active_params: float = 0.0
    spec_draft_layers: int = 0
    spec_draft_kv_elements_per_token: float = 0.0
    spec_draft_name: str = ""
    # Routing over replicas (sizing.routing): "" (the given prefix_hit_rate), "random",
    # "least_loaded" or "prefix_affinity", over ``distinct_prefixes`` prefixes.
    routing: str = ""
    distinct_prefixes: int = 0
    # Many LoRA adapters on one base (sizing.lora)
    lora_adapters: int = 0
    lora_rank: int = 0
    lora_target_modules: tuple[str, ...] = ()
    lora_active: float = 0.0  # distinct adapters in one batch
    lora_resident_slots: int = 0  # adapters kept in GPU memory (0: min(adapters, active))

    @property
    def spec_tokens_per_step(self) -> float:
        """Tokens per verify step (1.0 without speculative decoding)."""
        if not self.spec_method:
            return 1.0
        return tokens_per_verify_step(
            self.spec_acceptance, self.spec_tokens, self.spec_acceptance_by_position
        )

    @property
    def reserves_output(self) -> bool:
        """True where the engine admits a sequence only with the KV for its prompt and whole
        output free and never preempts: TensorRT-LLM, whose default capacity scheduler (and
        ``trtllm-bench``'s) is GUARANTEED_NO_EVICT. vLLM and SGLang admit on the tokens
        written so far and preempt under pressure."""
        return self.engine == "trtllm"


@dataclass(frozen=True)
class Calibration:
    """Efficiency constants of the roofline; the calibration issue fits them from measurements.

    Attributes
    ----------
    eta_mem : achieved fraction of HBM bandwidth in decode.
    eta_flop_decode, eta_flop_prefill : achieved fraction of dense peak FLOP/s.
    step_overhead_s : fixed per-step cost (scheduler, sampling, the step's fixed launches).
    step_overhead_per_layer_s : per-step cost per transformer layer (kernel launches and
        their gaps grow with the kernels a step runs, i.e. with the layers): a step costs
        ``step_overhead_s + step_overhead_per_layer_s * num_layers`` on top of the roofline.
    step_overhead_per_seq_s : per-step cost per decoding sequence (scheduling its slot,
        sampling its token, detokenizing), so a step of B sequences costs
        ``step_overhead_s + step_overhead_per_layer_s * L + step_overhead_per_seq_s * B``.
    step_overhead_per_moe_layer_s : the extra per-step cost of a mixture-of-experts layer
        over a dense one (router, top-k, token permute/unpermute and the grouped GEMMs'
        launches: several kernels a dense MLP does not run), times ``num_moe_layers``.
    prompt_overhead_per_moe_layer_s : host cost per MoE layer of a step that carries prompt
        tokens. Engines replay decode-only steps from CUDA graphs but run prompt (extend or
        mixed) steps eagerly, where each MoE layer's router, permutes and expert launches
        are paid on the host: ``num_moe_layers * prompt_overhead_per_moe_layer_s`` per such
        step, on top of ``step_overhead_total_s``.
    frontend_latency_s : fixed latency an engine adds to every request's first token
        (HTTP/tokenizer front-end, scheduler admission); part of TTFT only.
    first_token_decode_steps : disaggregated serving only: decode steps of the decode worker
        between a prompt's KV landing there and its first token reaching the client. The
        decode worker's event loop handles arrivals between its steps (pre-allocating the
        KV slots, polling for finished transfers, joining the running batch), so the first
        token waits about that many of its steps (``sizing.disagg``; 0 unfitted: aggregated
        engines have no such hand-off).
    prefill_wave_fraction : how coherent closed-loop waves of re-arriving prompts stay
        (0: spread out, 1: a whole batch's prompts arrive in one wave); scales the wait
        behind the wave in ``operating.closed_loop`` and, where the clients draw their
        lengths, the share of the lock-step prefill group a prompt's step still holds
        (``operating.prefill_group_tokens``).
    allreduce_latency_s : per all-reduce latency on the scale-up link.
    link_efficiency : achieved fraction of the link's one-way bandwidth.
    relative_error : +- band (fraction) on throughput and TPOT: the profile's cross-validated
        median absolute percentage error (``sizing.calibrate``); 0.25 unfitted.
    ttft_relative_error : the same for TTFT, which the model predicts worst (0.5 unfitted).

    ``name`` labels the profile a prediction used (e.g. "h200_sxm / vllm 0.21").
    """

    name: str = "physics defaults"
    eta_mem: float = 0.80
    eta_flop_decode: float = 0.60
    eta_flop_prefill: float = 0.55
    step_overhead_s: float = 0.004
    allreduce_latency_s: float = 8e-6
    link_efficiency: float = 0.70
    step_overhead_per_layer_s: float = 0.0
    step_overhead_per_seq_s: float = 0.0
    step_overhead_per_moe_layer_s: float = 0.0
    prompt_overhead_per_moe_layer_s: float = 0.0
    frontend_latency_s: float = 0.0
    prefill_wave_fraction: float = 0.0
    first_token_decode_steps: float = 0.0
    relative_error: float = 0.25  # +-band carried through the chain when no fit exists
    ttft_relative_error: float = 0.50


@dataclass(frozen=True)
class Traffic:
    """Offered load. ``peak_rps`` sizes the fleet; ``mean_rps`` sets utilization and cost."""

    peak_rps: float
    mean_rps: float
    prompt_tokens_mean: float
    output_tokens_mean: float
    prompt_tokens_p95: float | None = None
    output_tokens_p95: float | None = None
    shared_prefix_tokens: float = 0.0
    prefix_hit_rate: float = 0.0
    hourly_rps: tuple[float, ...] = field(default_factory=tuple)  # optional 24-value profile
    #: Vision-language input (``sizing.vision``): images per request and tokens per image
    #: (0: from the model's vision config, ``image_tiles`` tiles of ``tile_px`` px each)
    images_per_request: float = 0.0
    tokens_per_image: float = 0.0
    image_tiles: float = 1.0
    tile_px: float = 448.0
    #: image tokens already included in ``prompt_tokens_mean`` (set by ``vision.fold_images``)
    image_tokens: float = 0.0


@dataclass(frozen=True)
class Slo:
    """Latency targets at a percentile, and the share of requests that must meet both."""

    ttft_ms: float
    tpot_ms: float
    percentile: float = 95.0
    goodput_target: float = 0.99


@dataclass(frozen=True)
class Policy:
    """How much spare capacity to provision on top of the SLO-bound operating point."""

    target_utilization: float = 0.70
    spare_replicas: int = 1  # N+k
    burst_factor: float = 1.0  # extra multiplier on peak for bursts within the hour
    warm_pool_replicas: int = 0
    #: N+k by failure domain: the serving replicas survive this many whole nodes down
    #: (sizing.nodes); replica-level ``spare_replicas`` is separate.
    spare_nodes: int = 0
    #: The scenario's cold-start and autoscaling blocks (``sizing.fleet.BurstWarmPool``);
    #: with a burst stated the warm pool is sized from it, not ``warm_pool_replicas``. Not
    #: part of a run's snapshot (the blocks are stored on their own, ``fleet_life``).
    burst_warm_pool: Any = field(default=None, metadata={"snapshot": False})


@dataclass(frozen=True)
class ApiPrice:
    """A hosted API alternative in $ per million tokens."""

    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cached_input_usd_per_mtok: float | None = None
    label: str = ""
