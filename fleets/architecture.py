"""Read a Hugging Face ``config.json`` into the architecture fields the sizing chain needs.

Pure Python (no Django), so the parser and the parameter counter are testable on their own and
usable from a CLI. ``parse_hf_config`` returns an :class:`Architecture`; ``count_parameters``
derives total and active parameter counts from it.

Conventions (same as the reference catalog, see fleets/catalog/SOURCES.md):

- "active" = every non-expert weight + top-k routed experts + shared experts, counting both the
  embedding table and the LM head (vendors that quote a smaller "active" figure exclude the
  embedding table);
- multimodal wrappers count the text tower only (``text_config``);
- multi-token-prediction heads (DeepSeek ``num_nextn_predict_layers``) are not counted: they are
  optional at serving time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

REQUIRED_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")


class ConfigError(ValueError):
    """A config.json that is not a decoder-only causal LM we can size."""


@dataclass(frozen=True)
class Architecture:
    """Architecture fields of a decoder-only model, as stored in the catalog.

    Widths are element counts; ``intermediate_size`` is the dense-layer FFN width and
    ``moe_intermediate_size`` the width of one routed expert.
    """

    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False
    attn_output_gate: bool = False
    # MLA
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    index_n_heads: int = 0  # DeepSeek sparse-attention indexer (GLM-5)
    index_head_dim: int = 0
    # layer mix
    sliding_window: int = 0
    sliding_window_layers: int = 0
    linear_attention_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    global_kv_heads: int = 0  # Gemma 4: full-attention layers use fewer, wider KV heads
    global_head_dim: int = 0
    attention_k_eq_v: bool = False
    # MoE
    num_experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    num_moe_layers: int = 0
    dense_mlp_in_moe_layers: bool = False  # Gemma 4 runs a dense MLP beside the experts
    max_context: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def full_attention_layers(self) -> int:
        return self.num_layers - self.sliding_window_layers - self.linear_attention_layers

    def as_dict(self) -> dict:
        data = asdict(self)
        data["notes"] = list(self.notes)
        return data


def _first(cfg: dict, *keys: str, default=None):
    for key in keys:
        value = cfg.get(key)
        if value is not None:
            return value
    return default


def _text_config(cfg: dict) -> dict:
    """Multimodal wrappers (Llama 4, Kimi K2.5, Qwen3.5, Gemma 4) nest the LM in text_config."""
    text = cfg.get("text_config")
    if isinstance(text, dict):
        return text
    return cfg


def _require(text: dict) -> None:
    for key in REQUIRED_KEYS:
        value = text.get(key)
        if value is None:
            raise ConfigError(f"not a causal-LM config: missing key {key!r}")
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{key} must be a positive integer, got {value!r}")


def _count_layer_types(text: dict, name: str) -> int:
    return sum(1 for kind in text.get("layer_types") or [] if kind == name)


def _sliding_layers(text: dict, num_layers: int) -> tuple[int, int]:
    """Return (window tokens, number of windowed layers)."""
    chunk = text.get("attention_chunk_size")
    if chunk and text.get("model_type", "").startswith("llama4"):
        # Llama 4: chunked local attention on 3 of every 4 layers, every 4th layer global NoPE.
        return int(chunk), num_layers - num_layers // 4
    window = text.get("sliding_window")
    if not window or text.get("use_sliding_window") is False:
        return 0, 0
    typed = _count_layer_types(text, "sliding_attention")
    if typed:
        return int(window), typed
    pattern = text.get("sliding_window_pattern")
    if pattern:  # Gemma 3: N-1 local layers per global one
        return int(window), num_layers - num_layers // int(pattern)
    return int(window), num_layers  # Mistral 7B v0.1: every layer windowed


def _moe_fields(text: dict, num_layers: int) -> dict:
    experts = int(_first(text, "n_routed_experts", "num_local_experts", "num_experts", default=0))
    if not experts:
        return {}
    top_k = int(_first(text, "num_experts_per_tok", "experts_per_token", "top_k_experts"))
    model_type = text.get("model_type", "")
    shared_width = int(_first(text, "shared_expert_intermediate_size", default=0) or 0)
    shared = int(_first(text, "n_shared_experts", default=0) or 0)
    if model_type.startswith("llama4"):
        shared = 1  # Llama 4 always adds one shared expert of the expert width
    if shared_width and not shared:
        shared = 1
    expert_width = int(
        _first(text, "moe_intermediate_size", default=0) or text["intermediate_size"]
    )
    first_dense = int(_first(text, "first_k_dense_replace", default=0) or 0)
    step = int(_first(text, "interleave_moe_layer_step", "decoder_sparse_step", default=1) or 1)
    mlp_only = len(text.get("mlp_only_layers") or [])
    moe_layers = len([i for i in range(first_dense, num_layers) if (i + 1) % step == 0])
    moe_layers -= mlp_only
    return {
        "num_experts": experts,
        "experts_per_token": top_k,
        "shared_experts": shared,
        "moe_intermediate_size": expert_width,
        "shared_expert_intermediate_size": shared_width or (expert_width if shared else 0),
        "num_moe_layers": moe_layers,
        "dense_mlp_in_moe_layers": bool(text.get("enable_moe_block")),
    }


def _dense_width(text: dict) -> int:
    """FFN width of the dense layers (Llama 4 keeps it in intermediate_size_mlp)."""
    if text.get("model_type", "").startswith("llama4"):
        return int(text.get("intermediate_size_mlp") or text["intermediate_size"])
    return int(text.get("intermediate_size") or 4 * text["hidden_size"])


def parse_hf_config(cfg: dict) -> Architecture:
    """Map a Hugging Face config.json (already loaded as a dict) to an :class:`Architecture`.

    Raises :class:`ConfigError` naming the missing or invalid key.
    """
    if not isinstance(cfg, dict):
        raise ConfigError("config must be a JSON object")
    text = _text_config(cfg)
    _require(text)
    num_layers = text["num_hidden_layers"]
    hidden = text["hidden_size"]
    heads = text["num_attention_heads"]
    kv_lora = int(text.get("kv_lora_rank") or 0)
    rope = int(text.get("qk_rope_head_dim") or 0)
    nope = int(text.get("qk_nope_head_dim") or 0)
    # MLA heads are nope + rope wide; others say head_dim or imply hidden / heads.
    head_dim = nope + rope if kv_lora else int(text.get("head_dim") or hidden // heads)
    window, sliding_layers = _sliding_layers(text, num_layers)
    linear_layers = _count_layer_types(text, "linear_attention")
    notes = []
    if text is not cfg:
        notes.append("text tower of a multimodal wrapper (text_config)")
    return Architecture(
        model_type=str(text.get("model_type") or cfg.get("model_type") or "unknown"),
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=int(text.get("num_key_value_heads") or heads),
        head_dim=head_dim,
        intermediate_size=_dense_width(text),
        vocab_size=text["vocab_size"],
        tie_word_embeddings=bool(_first(text, "tie_word_embeddings", default=False)),
        attention_bias=bool(text.get("attention_bias")),
        qk_norm=bool(text.get("use_qk_norm")) or text.get("model_type", "").startswith("qwen3"),
        attn_output_gate=bool(text.get("attn_output_gate")),
        q_lora_rank=int(text.get("q_lora_rank") or 0),
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        v_head_dim=int(text.get("v_head_dim") or 0),
        index_n_heads=int(text.get("index_n_heads") or 0),
        index_head_dim=int(text.get("index_head_dim") or 0),
        sliding_window=window,
        sliding_window_layers=sliding_layers,
        linear_attention_layers=linear_layers,
        linear_num_key_heads=int(text.get("linear_num_key_heads") or 0),
        linear_num_value_heads=int(text.get("linear_num_value_heads") or 0),
        linear_key_head_dim=int(text.get("linear_key_head_dim") or 0),
        linear_value_head_dim=int(text.get("linear_value_head_dim") or 0),
        linear_conv_kernel_dim=int(text.get("linear_conv_kernel_dim") or 0),
        global_kv_heads=int(text.get("num_global_key_value_heads") or 0),
        global_head_dim=int(text.get("global_head_dim") or 0),
        attention_k_eq_v=bool(text.get("attention_k_eq_v")),
        max_context=int(text.get("max_position_embeddings") or 0),
        notes=tuple(notes),
        **_moe_fields(text, num_layers),
    )


# --- parameter counting ---------------------------------------------------------------------


def _gqa_attention_params(a: Architecture, kv_heads: int, head_dim: int, k_eq_v: bool) -> int:
    q = a.hidden_size * a.num_attention_heads * head_dim * (2 if a.attn_output_gate else 1)
    kv = a.hidden_size * kv_heads * head_dim * (1 if k_eq_v else 2)
    o = a.num_attention_heads * head_dim * a.hidden_size
    bias = (a.num_attention_heads + 2 * kv_heads) * head_dim + a.hidden_size
    norm = 2 * head_dim if a.qk_norm else 0
    return q + kv + o + (bias if a.attention_bias else 0) + norm


def _mla_attention_params(a: Architecture) -> int:
    qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
    if a.q_lora_rank:
        q = (
            a.hidden_size * a.q_lora_rank
            + a.q_lora_rank
            + a.q_lora_rank * a.num_attention_heads * qk_head
        )
    else:
        q = a.hidden_size * a.num_attention_heads * qk_head
    kv_down = a.hidden_size * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
    kv_up = a.kv_lora_rank * a.num_attention_heads * (a.qk_nope_head_dim + a.v_head_dim)
    o = a.num_attention_heads * a.v_head_dim * a.hidden_size
    indexer = 0
    if a.index_n_heads:  # DSA lightning indexer: q from the q latent, one shared k, head weights
        q_in = a.q_lora_rank or a.hidden_size
        indexer = (
            q_in * a.index_n_heads * a.index_head_dim
            + a.hidden_size * a.index_head_dim
            + a.hidden_size * a.index_n_heads
        )
    return q + kv_down + kv_up + o + indexer


def _linear_attention_params(a: Architecture) -> int:
    """Gated DeltaNet (Qwen3.5): fused qkvz and ba projections, a short conv, the out proj."""
    key_dim = a.linear_num_key_heads * a.linear_key_head_dim
    value_dim = a.linear_num_value_heads * a.linear_value_head_dim
    in_proj = a.hidden_size * (2 * key_dim + 2 * value_dim + 2 * a.linear_num_value_heads)
    conv = (2 * key_dim + value_dim) * a.linear_conv_kernel_dim
    out = value_dim * a.hidden_size
    return in_proj + conv + out + 2 * a.linear_num_value_heads + a.linear_value_head_dim


def _attention_params_total(a: Architecture) -> int:
    if a.is_mla:
        return a.num_layers * _mla_attention_params(a)
    softmax_layers = a.num_layers - a.linear_attention_layers
    local = _gqa_attention_params(a, a.num_kv_heads, a.head_dim, False)
    total = softmax_layers * local
    if a.global_kv_heads:  # Gemma 4 global layers: other KV heads and head_dim
        glob = _gqa_attention_params(
            a, a.global_kv_heads, a.global_head_dim or a.head_dim, a.attention_k_eq_v
        )
        total += a.full_attention_layers * (glob - local)
    return total + a.linear_attention_layers * _linear_attention_params(a)


def expert_params(a: Architecture) -> int:
    """One routed expert of one layer: gated FFN (gate, up, down)."""
    return 3 * a.hidden_size * a.moe_intermediate_size


def count_parameters(a: Architecture) -> dict[str, int]:
    """Total and active parameter counts, with the pieces the sizing chain needs.

    Gated FFN = 3*hidden*width; router = hidden*experts per MoE layer; two RMSNorms per layer
    plus the final one. Returns ints: total, active, embedding, per_expert, routed_total.
    """
    h = a.hidden_size
    embedding = a.vocab_size * h
    lm_head = 0 if a.tie_word_embeddings else a.vocab_size * h
    norms = (2 * a.num_layers + 1) * h
    attention = _attention_params_total(a)
    dense_ffn = 3 * h * a.intermediate_size
    per_expert = expert_params(a) if a.num_experts else 0
    moe_layers = a.num_moe_layers if a.num_experts else 0
    dense_layers = a.num_layers - moe_layers
    shared = 3 * h * a.shared_expert_intermediate_size if a.shared_experts else 0
    router = h * a.num_experts
    ffn_dense_part = dense_layers * dense_ffn + moe_layers * (
        shared + router + (dense_ffn if a.dense_mlp_in_moe_layers else 0)
    )
    routed_total = moe_layers * a.num_experts * per_expert
    routed_active = moe_layers * a.experts_per_token * per_expert
    non_expert = embedding + lm_head + norms + attention + ffn_dense_part
    return {
        "total": non_expert + routed_total,
        "active": non_expert + routed_active,
        "embedding": embedding,
        "per_expert": per_expert,
        "routed_total": routed_total,
    }
