"""Cold start: the seconds from "a replica is scheduled" to "it serves", as a chain of links.

``cold_start_s = image_pull_s + weight_load_s + init_s + graph_capture_s + warmup_s``

- image pull: ``image_gb / registry_gb_s`` (0 when the node has the image cached);
- weight load: the replica's weight bytes over the source's bandwidth. A node-shared source
  (object store, local NVMe) feeds every GPU of the replica through one pipe:
  ``weights_gb_per_gpu * gpus_per_replica / weights_gb_s``; a per-GPU source (host page cache
  over each GPU's PCIe link, peer GPUs over each GPU's scale-up link) loads the shards in
  parallel: ``weights_gb_per_gpu / weights_gb_s``;
- CUDA context and engine init (process start, tokenizer, KV-cache profiling, compile with
  a warm cache), CUDA-graph capture, and a warm-up request.

Worked number: Llama 3.1 70B bf16 on TP8 is 141.1 GB, 17.64 GB per GPU; from local NVMe at
6.5 GB/s: ``17.64 * 8 / 6.5 = 21.71 s``; with a 12 GB image at 0.5 GB/s (24 s), 30 s init,
17 s graph capture and 2 s warm-up the replica serves after 94.71 s.

Every default carries its figure and public source (``SOURCES``, ``WEIGHTS_GB_S_SOURCES``;
"assumption" where the figure is ours); each is overridable in the scenario's ``cold_start``
block, and the output lists the defaults used with their sources.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from sizing.derivation import Step, defaults_note, q, step

WEIGHTS_SOURCES = ("object_store", "nvme", "page_cache", "peer")
#: Sources whose bandwidth is shared by all GPUs of a replica (one pipe into the node).
SHARED_SOURCES = ("object_store", "nvme")

#: Default bandwidth (GB/s) by weights source; ``WEIGHTS_GB_S_SOURCES`` says where each
#: figure comes from (the output repeats it beside "default").
WEIGHTS_GB_S: dict[str, float] = {
    "object_store": 0.8125,  # 6.5 Gbit/s measured (WEIGHTS_GB_S_SOURCES)
    "nvme": 6.5,  # Samsung PM9A3 rated sequential read
    "page_cache": 25.0,  # assumption: ~40% of PCIe Gen5 x16 per direction
    "peer": 50.0,  # one 400 Gb/s NIC per GPU (DGX H100)
}
WEIGHTS_GB_S_SOURCES: dict[str, str] = {
    "object_store": (
        "0.8125 GB/s: 6.5 Gbit/s measured from S3 with 64 parallel 8 MB range requests on an "
        "m5zn.6xlarge (s3-getobject-accelerator README, "
        "https://github.com/widdix/s3-getobject-accelerator); AWS: S3 throughput scales with "
        "parallel byte-range requests (https://docs.aws.amazon.com/AmazonS3/latest/userguide/"
        "optimizing-performance-guidelines.html)"
    ),
    "nvme": (
        "6.5 GB/s: sequential read of a PCIe 4.0 x4 data-center NVMe drive, Samsung PM9A3 "
        "U.2/E1.S 'up to 6,500 MB/s' (Samsung's 2020 announcement, reported at "
        "https://www.computerbase.de/2020-05/samsung-pm9a3-e1.s-pcie-4.0-ssd/)"
    ),
    "page_cache": (
        "25 GB/s per GPU: assumption, ~40% of PCIe Gen5 x16's 64 GB/s per direction (NVIDIA "
        "H100 datasheet: PCIe Gen5 128 GB/s, https://www.nvidia.com/en-us/data-center/h100/) "
        "for a loader copying from host memory"
    ),
    "peer": (
        "50 GB/s per GPU: one 400 Gb/s ConnectX-7 NIC per GPU (NVIDIA DGX H100 datasheet, "
        "https://www.nvidia.com/en-us/data-center/dgx-h100/), GPUDirect RDMA from a running "
        "replica; the same figure as GpuSpec.scale_out_gb_s"
    ),
}

#: Where every other default of the block comes from (the output repeats it beside
#: "default"); "assumption" says when a figure is ours.
SOURCES: dict[str, str] = {
    "image_gb": (
        "12 GB: 'docker pull vllm/vllm-openai:latest - the image is around 12 GB' "
        "(vLLM issue #27154, https://github.com/vllm-project/vllm/issues/27154)"
    ),
    "registry_gb_s": (
        "0.5 GB/s: assumption; a pull from a same-region registry is bound by layer "
        "decompression and extraction more than by the network (no single public figure)"
    ),
    "image_cached": "false: a node the autoscaler adds starts without the image (assumption)",
    "weights_source": "nvme: weights staged on the node's local NVMe (assumption)",
    "init_s": (
        "30 s: assumption anchored on vLLM issue #20264 (torch.compile cache persisted): "
        "'init engine (profile, create kv cache, warmup model) took 34.11 seconds' of which "
        "17 s graph capture, and the first response came 59 s after start; 30 s sits between "
        "the engine's own 17 s and the pod's 41 s besides weights and graphs "
        "(https://github.com/vllm-project/vllm/issues/20264); the phases are CPU-bound "
        "('Breaking the Ice: Analyzing Cold Start Latency in vLLM', MLSys 2026, "
        "arXiv:2606.07362)"
    ),
    "graph_capture_s": (
        "17 s: 'Graph capturing finished in 17 secs' (vLLM issue #20264); vLLM captures 67 "
        "graphs by default, which 'can take more than 10s' (vLLM RFC #20098, "
        "https://github.com/vllm-project/vllm/issues/20098)"
    ),
    "warmup_s": "2 s: one dummy request before readiness reports true (assumption)",
}


@dataclass(frozen=True)
class ColdStartInputs:
    """The scenario's ``cold_start`` block, defaults filled in; each default's figure and
    public source is in ``SOURCES`` (``WEIGHTS_GB_S_SOURCES`` for the bandwidths)."""

    image_gb: float = 12.0  # vLLM issue #27154 (SOURCES)
    registry_gb_s: float = 0.5  # assumption (SOURCES)
    image_cached: bool = False  # assumption (SOURCES)
    weights_source: str = "nvme"  # assumption (SOURCES)
    weights_gb_s: float | None = None  # None: WEIGHTS_GB_S[weights_source]
    init_s: float = 30.0  # assumption anchored on vLLM issue #20264 (SOURCES)
    graph_capture_s: float = 17.0  # vLLM issue #20264 (SOURCES)
    warmup_s: float = 2.0  # assumption (SOURCES)
    defaults: tuple[str, ...] = ()  # the fields the scenario did not give

    @property
    def source_gb_s(self) -> float:
        if self.weights_gb_s is not None:
            return self.weights_gb_s
        return WEIGHTS_GB_S[self.weights_source]


FIELDS = tuple(f.name for f in fields(ColdStartInputs) if f.name != "defaults")


def default_sources(inputs: ColdStartInputs) -> dict[str, str]:
    """``{field: figure and source}`` for every field the scenario left to its default."""
    out = {name: SOURCES[name] for name in inputs.defaults if name in SOURCES}
    if "weights_gb_s" in inputs.defaults:
        out["weights_gb_s"] = WEIGHTS_GB_S_SOURCES[inputs.weights_source]
    return out


def from_block(block: dict | None) -> ColdStartInputs:
    """The block (already validated) with defaults for the missing fields."""
    block = block or {}
    given = {k: v for k, v in block.items() if k in FIELDS and v is not None}
    base = replace(ColdStartInputs(), **given)
    return replace(base, defaults=tuple(f for f in FIELDS if f not in given))


@dataclass(frozen=True)
class ColdStart:
    """The chain's links (s) and their sum."""

    image_pull_s: float
    weight_load_s: float
    init_s: float
    graph_capture_s: float
    warmup_s: float

    @property
    def cold_start_s(self) -> float:
        return (
            self.image_pull_s
            + self.weight_load_s
            + self.init_s
            + self.graph_capture_s
            + self.warmup_s
        )

    def links(self) -> dict[str, float]:
        return {
            "image_pull_s": self.image_pull_s,
            "weight_load_s": self.weight_load_s,
            "init_s": self.init_s,
            "graph_capture_s": self.graph_capture_s,
            "warmup_s": self.warmup_s,
        }


def image_pull_s(inputs: ColdStartInputs) -> float:
    return 0.0 if inputs.image_cached else inputs.image_gb / inputs.registry_gb_s


def weight_load_s(inputs: ColdStartInputs, weights_gb_per_gpu, gpus_per_replica):
    """``weights_gb_per_gpu * gpus_sharing_source / weights_gb_s`` (s; arrays welcome)."""
    shared = inputs.weights_source in SHARED_SOURCES
    gpus = gpus_per_replica if shared else 1
    return np.asarray(weights_gb_per_gpu, dtype=np.float64) * gpus / inputs.source_gb_s


def cold_start_s(inputs: ColdStartInputs, weights_gb_per_gpu, gpus_per_replica) -> np.ndarray:
    """The chain's total for n candidates at once (s): the same links as ``cold_start``."""
    return (
        image_pull_s(inputs)
        + weight_load_s(inputs, weights_gb_per_gpu, gpus_per_replica)
        + inputs.init_s
        + inputs.graph_capture_s
        + inputs.warmup_s
    )


def cold_start(
    inputs: ColdStartInputs, weights_gb_per_gpu: float, gpus_per_replica: int
) -> tuple[ColdStart, list[Step]]:
    """Cold start of one replica, with one derivation step per link and the total."""
    pull = image_pull_s(inputs)
    shared = inputs.weights_source in SHARED_SOURCES
    gpus = gpus_per_replica if shared else 1
    load = float(weight_load_s(inputs, weights_gb_per_gpu, gpus_per_replica))
    result = ColdStart(pull, load, inputs.init_s, inputs.graph_capture_s, inputs.warmup_s)
    src = inputs.weights_source
    pull_step = (
        step("image_pull_s", "0", [q("image_cached", 1, "")], 0.0, "s", "image cached on the node")
        if inputs.image_cached
        else step(
            "image_pull_s",
            "image_gb / registry_gb_s",
            [
                q("image_gb", inputs.image_gb, "GB"),
                q("registry_gb_s", inputs.registry_gb_s, "GB/s"),
            ],
            pull,
            "s",
        )
    )
    load_note = (
        f"{weights_gb_per_gpu * gpus_per_replica:.1f} GB over {gpus_per_replica} GPUs from "
        f"{src} at {inputs.source_gb_s:g} GB/s"
        + (" (one pipe per replica)" if shared else " (per GPU, in parallel)")
    )
    steps = [
        pull_step,
        step(
            "weight_load_s",
            "weights_gb_per_gpu * gpus_sharing_source / weights_gb_s",
            [
                q("weights_gb_per_gpu", weights_gb_per_gpu, "GB"),
                q("gpus_sharing_source", gpus, "GPUs"),
                q("weights_gb_s", inputs.source_gb_s, "GB/s"),
            ],
            load,
            "s",
            load_note,
        ),
        step(
            "cold_start_s",
            "image_pull_s + weight_load_s + init_s + graph_capture_s + warmup_s",
            [q(k, v, "s") for k, v in result.links().items()],
            result.cold_start_s,
            "s",
            defaults_note(default_sources(inputs)),
        ),
    ]
    return result, steps
