"""Many LoRA fine-tunes on one base model: their memory, their step cost, their swap-ins.

An adapter of rank r on a module of shape ``d_in -> d_out`` adds ``A (r x d_in)`` and
``B (d_out x r)``: ``r * (d_in + d_out)`` params. Over the target modules and layers, in bf16:

``adapter_bytes = r * sum_modules(d_in + d_out) * layers * 2 B``

(for modules of one shape d -> d that is the ``2 x r x d x modules x layers x bytes`` rule).
Module shapes come from the model: q ``hidden -> n_h d``, k and v ``hidden -> n_kv d``, o
``n_h d -> hidden``, gate and up ``hidden -> I``, down ``I -> hidden`` with the MLP width
``I = (active - embeddings - layers * attention) / (3 * hidden * layers)`` (dense models; for MoE
the routed expert's width, LoRA on one expert's shape).

- Memory: the resident adapter slots are held on every GPU of a replica, split over TP and
  PP like the base weights: the KV budget shrinks by ``slots * adapter_bytes / (TP * PP)``.
- Step time: the batched-adapter kernels (Punica's SGMV, vLLM's punica kernels) read each
  distinct adapter of the step once and run ``2 * r * sum(d_in + d_out)`` FLOPs per token per
  layer, as separate kernels after the base GEMMs:
  ``lora_s = active * adapter_bytes / (TP PP BW eta_mem) + flops / (F eta_flop)
  + step_overhead_per_layer_s * L`` (one more kernel group per layer).
- Swap-in: with N adapters and S resident slots under uniform use, a request's adapter is not
  resident with probability ``1 - S / N``; loading it costs ``adapter_bytes / host_link`` on its
  TTFT (``HOST_LINK_BYTES_S``).
- One deployment per fine-tune would need ``N`` replicas of the base; the plan shows both.

Validation (tests/sizing/test_lora.py): Punica (Chen et al., "Punica: Multi-Tenant LoRA
Serving", MLSys 2024, https://arxiv.org/abs/2310.18547) reports LoRA serving "only adding 2ms
latency per token" for Llama 2 7B on an A100.
"""

from __future__ import annotations

import numpy as np

from sizing.candidates import CandidateArrays, row_constant

#: LoRA adapters ship and run in bf16
LORA_BYTES_PER_PARAM = 2.0
#: Host-to-GPU copy bandwidth for an adapter swap-in: PCIe 5.0 x16, 64 GB/s per direction
#: (PCI-SIG PCIe 5.0 specification: 32 GT/s x 16 lanes), before link efficiency.
HOST_LINK_BYTES_S = 64e9


def mlp_width(c: CandidateArrays) -> np.ndarray:
    """MLP intermediate width ``I`` (see the module docstring)."""
    attention = c.hidden_size * c.head_dim * (2 * c.num_attention_heads + 2 * c.num_kv_heads)
    embeddings = c.embedding_params * np.where(c.tied_embeddings, 1.0, 2.0)
    dense = (c.active_params - embeddings - c.num_layers * attention) / (3 * c.hidden_size)
    dense = dense / c.num_layers
    expert = c.params_per_expert / (3 * c.hidden_size)
    return np.maximum(np.where(c.num_experts > 0, expert, dense), 0.0)


def module_dims_per_layer(c: CandidateArrays) -> np.ndarray:
    """``sum over target modules of (d_in + d_out)`` for one layer (elements)."""
    h, q, kv, inter = (c.hidden_size, c.num_attention_heads * c.head_dim,
                       c.num_kv_heads * c.head_dim, mlp_width(c))  # fmt: skip
    dims = (h + q, h + kv, h + kv, q + h, h + inter, h + inter, inter + h)
    mask = c.lora_module_mask.astype(np.int64)
    total = np.zeros(len(c))
    for j, d in enumerate(dims):
        total = total + np.where(mask & (1 << j), d, 0.0)
    return total


def adapter_bytes(c: CandidateArrays) -> np.ndarray:
    """One adapter, whole model: ``r * sum(d_in + d_out) * layers * 2 B`` (B); 0 without LoRA."""
    return c.lora_rank * module_dims_per_layer(c) * c.num_layers * LORA_BYTES_PER_PARAM


def adapter_bytes_per_gpu(c: CandidateArrays) -> np.ndarray:
    return adapter_bytes(c) / (c.tp * c.pp)


def resident_bytes_per_gpu(c: CandidateArrays) -> np.ndarray:
    """The resident adapter slots on one GPU (B); they come out of the KV budget."""
    return c.lora_resident_slots * adapter_bytes_per_gpu(c)


@row_constant
def serves_adapters(c: CandidateArrays) -> bool:
    """Any row serving LoRA adapters (else a step adds no adapter time)."""
    return bool((c.lora_rank > 0).any())


def lora_step_s(c: CandidateArrays, tokens: np.ndarray) -> np.ndarray:
    """Added time of one engine step with ``tokens`` per DP rank (s); 0 without LoRA."""
    t = np.asarray(tokens, dtype=np.float64)
    if not serves_adapters(c):  # no row serves adapters: skip the module shapes (all 0)
        return np.zeros(np.broadcast(t, c.lora_rank).shape)
    read = c.lora_active * adapter_bytes_per_gpu(c) / (c.hbm_bytes_s * c.eta_mem)
    flops = 2.0 * c.lora_rank * module_dims_per_layer(c) * c.num_layers * t / (c.tp * c.pp)
    compute = flops / (c.peak_flops * c.eta_flop_decode)
    kernels = c.step_overhead_per_layer_s * c.num_layers
    return np.where(c.lora_rank > 0, read + compute + kernels, 0.0)


def swap_in_s(c: CandidateArrays) -> np.ndarray:
    """Expected TTFT added by loading non-resident adapters: ``(1 - S / N) * bytes / link``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        miss = np.where(c.lora_adapters > 0, 1.0 - c.lora_resident_slots / c.lora_adapters, 0.0)
    load = adapter_bytes_per_gpu(c) / (HOST_LINK_BYTES_S * c.link_efficiency)
    return np.where(c.lora_rank > 0, np.maximum(miss, 0.0) * load, 0.0)
