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
7 GB/s: ``17.64 * 8 / 7 = 20.2 s``; with a 10 GB image at 0.5 GB/s (20 s), 30 s init, 10 s
graph capture and 2 s warm-up the replica serves after 82.2 s.

Defaults are public figures of the order of what a platform sees; each is overridable in the
scenario's ``cold_start`` block and the output says which were defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from sizing.derivation import Step, q, step

WEIGHTS_SOURCES = ("object_store", "nvme", "page_cache", "peer")
#: Sources whose bandwidth is shared by all GPUs of a replica (one pipe into the node).
SHARED_SOURCES = ("object_store", "nvme")

#: Default bandwidth (GB/s) by weights source.
#: - object_store: ~1.25 GB/s, a 10 Gb/s share of a node's NIC on S3-class storage; AWS says
#:   S3 scales per prefix and a single client reaches up to 100 Gb/s only with many parallel
#:   range requests (https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html).
#:   Our assumption for a plain loader, not a measured figure.
#: - nvme: 7 GB/s, the sequential read of a PCIe 4.0 x4 data-center NVMe drive (e.g. Samsung
#:   PM9A3 lists 6.9 GB/s, https://semiconductor.samsung.com/ssd/datacenter-ssd/pm9a3/).
#: - page_cache: 25 GB/s per GPU, a host-to-device copy from pinned memory over PCIe 5.0 x16
#:   (64 GB/s per direction theoretical; NVIDIA's bandwidthTest reaches roughly 25-55 GB/s
#:   depending on platform). Order of magnitude, not a citation of one measurement.
#: - peer: 50 GB/s per GPU, a 400 Gb/s NIC per GPU (GPUDirect RDMA) from a running replica;
#:   the same figure as ``GpuSpec.scale_out_gb_s``.
WEIGHTS_GB_S: dict[str, float] = {
    "object_store": 1.25,
    "nvme": 7.0,
    "page_cache": 25.0,
    "peer": 50.0,
}


@dataclass(frozen=True)
class ColdStartInputs:
    """The scenario's ``cold_start`` block, defaults filled in.

    Defaults and where they come from:

    - ``image_gb`` 10: the vLLM OpenAI server image (``vllm/vllm-openai`` on Docker Hub) is of
      the order of 10 GB compressed for recent CUDA 12 tags (approximate; check your tag).
    - ``registry_gb_s`` 0.5: a pull is bound by layer decompression and extraction more than by
      the network; ~0.5 GB/s is our assumption for a registry in the same region, not a figure
      from one public source.
    - ``image_cached`` False: a node added by the autoscaler starts without the image.
    - ``weights_source`` "nvme", ``weights_gb_s`` from ``WEIGHTS_GB_S``.
    - ``init_s`` 30: CUDA context, engine start, KV profiling and torch.compile with a warm
      cache; the vLLM start-up study "Breaking the Ice: Analyzing Cold Start Latency in vLLM"
      (arXiv 2606.07362) breaks this into CPU-bound phases of seconds to tens of seconds.
    - ``graph_capture_s`` 10: one report measured 43 s for 371 capture sizes with vLLM 0.25
      (https://huggingface.co/nvidia/Nemotron-3-Embed-1B-NVFP4/discussions/4); vLLM's default
      set is ~67 sizes, i.e. ~8 s at that rate, rounded up.
    - ``warmup_s`` 2: one dummy request before readiness reports true.
    """

    image_gb: float = 10.0
    registry_gb_s: float = 0.5
    image_cached: bool = False
    weights_source: str = "nvme"
    weights_gb_s: float | None = None  # None: WEIGHTS_GB_S[weights_source]
    init_s: float = 30.0
    graph_capture_s: float = 10.0
    warmup_s: float = 2.0
    defaults: tuple[str, ...] = ()  # the fields the scenario did not give

    @property
    def source_gb_s(self) -> float:
        if self.weights_gb_s is not None:
            return self.weights_gb_s
        return WEIGHTS_GB_S[self.weights_source]


FIELDS = tuple(f.name for f in fields(ColdStartInputs) if f.name != "defaults")


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


def cold_start(
    inputs: ColdStartInputs, weights_gb_per_gpu: float, gpus_per_replica: int
) -> tuple[ColdStart, list[Step]]:
    """Cold start of one replica, with one derivation step per link and the total."""
    pull = 0.0 if inputs.image_cached else inputs.image_gb / inputs.registry_gb_s
    shared = inputs.weights_source in SHARED_SOURCES
    gpus = gpus_per_replica if shared else 1
    load = weights_gb_per_gpu * gpus / inputs.source_gb_s
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
            "defaults used: " + ", ".join(inputs.defaults) if inputs.defaults else "all given",
        ),
    ]
    return result, steps
