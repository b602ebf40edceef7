"""A Kubernetes starting point for one recommendation: Deployment + Service + autoscaler.

Every number in the YAML is the plan's: GPUs per pod = the replica's GPUs, the vLLM arguments
are the engine settings and the operating point the sizing assumed (TP, the batch as
``--max-num-seqs``, ``--gpu-memory-utilization``, ``--max-num-batched-tokens``, the KV-cache
dtype, ``--max-model-len`` = the p95 request the memory fit checked), and the autoscaler
scales on in-flight requests per pod with the thresholds and cooldowns of
``sizing.autoscale.design`` (as the run summary shows them).

The autoscaler is a KEDA ScaledObject when the plan scales to zero or holds a warm pool (KEDA
allows ``minReplicaCount: 0`` and adds the warm pool with a scaling-modifier formula,
https://keda.sh/docs/latest/reference/scaledobject-spec/), else a HorizontalPodAutoscaler
(autoscaling/v2) on a Pods metric served by a Prometheus adapter.

A replica that spans nodes (TP x PP GPUs > the GPUs of one node) cannot be a Deployment: it
becomes a LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``; one group of ``size`` pods per
replica, one pod per node, each requesting ``gpus_per_replica / size`` GPUs), the form vLLM
documents for multi-node serving (https://docs.vllm.ai/en/latest/deployment/frameworks/lws.html):
the leader starts a Ray head with ``multi-node-serving.sh leader
--ray_cluster_size=$(LWS_GROUP_SIZE)`` and then the OpenAI server with the same engine
arguments plus ``--distributed-executor-backend ray``; each worker joins with
``multi-node-serving.sh worker --ray_address=$(LWS_LEADER_ADDRESS)``. The Service selects the
leaders (the only pods that serve HTTP) and the autoscaler scales the LeaderWorkerSet by whole
groups (its scale subresource counts groups).
"""

from __future__ import annotations

import math
import re
import shlex

import yaml

from planner.models import SizingRun

HTTP_PORT = 8000
#: vLLM's OpenAI-compatible server image; ROCm builds for AMD GPUs.
IMAGES = {"nvidia": "vllm/vllm-openai:latest", "amd": "rocm/vllm:latest"}
#: The device plugin's resource names (NVIDIA and AMD Kubernetes device plugins).
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
KV_DTYPES = {"fp8": "fp8", "int8": "fp8"}  # anything else: "auto" (the model's dtype)
WEIGHT_MOUNT = "/models"
AUTOSCALERS = ("hpa", "keda")
PROMETHEUS = "http://prometheus.monitoring:9090"  # a placeholder: your Prometheus
#: LeaderWorkerSet API (https://github.com/kubernetes-sigs/lws) and the Ray helper script the
#: vLLM image ships (examples/online_serving/multi-node-serving.sh in the vLLM repository).
LWS_API = "leaderworkerset.x-k8s.io/v1"
RAY_SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"
SERVER = ["python3", "-m", "vllm.entrypoints.openai.api_server"]  # the image's entrypoint


class DeployError(ValueError):
    """A request for a deployment the run cannot give; ``field`` names the parameter."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _entry(run: SizingRun, gpu: str) -> dict:
    entries = {e["gpu"]: e for e in (run.summary or {}).get("per_gpu") or []}
    if not gpu:
        raise DeployError("gpu", f"give ?gpu=<slug>, one of {', '.join(entries) or 'none'}")
    entry = entries.get(gpu)
    if entry is None:
        raise DeployError("gpu", f"{gpu!r} is not a GPU of this run: {', '.join(entries)}")
    if not entry.get("recommended"):
        raise DeployError("gpu", f"no recommendation on {gpu}: {entry.get('why_none', '')}")
    if not entry.get("autoscaling"):
        raise DeployError("gpu", "this run has no autoscaling plan (older run): run it again")
    return entry


def _dns_name(*parts: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return re.sub(r"-+", "-", name)[:63].rstrip("-")


def max_model_len(traffic: dict) -> int:
    """The longest request the memory fit checked: p95 prompt + p95 output (means if none)."""
    prompt = traffic.get("prompt_tokens_p95") or traffic.get("prompt_tokens_mean") or 0
    output = traffic.get("output_tokens_p95") or traffic.get("output_tokens_mean") or 0
    return int(math.ceil(prompt + output))


def vllm_args(run: SizingRun, result, model_id: str) -> list[str]:
    """The ``vllm serve`` arguments the sizing assumed."""
    engine = run.inputs.get("engine") or {}
    args = [
        "--model", model_id,
        "--port", str(HTTP_PORT),
        "--download-dir", WEIGHT_MOUNT,
        "--tensor-parallel-size", str(result.tp),
        "--max-num-seqs", str(max(int(result.batch), 1)),
        "--gpu-memory-utilization", f"{engine.get('gpu_memory_utilization', 0.9):g}",
        "--max-num-batched-tokens", str(int(engine.get("max_num_batched_tokens", 8192))),
        "--kv-cache-dtype", KV_DTYPES.get(result.kv_precision or "", "auto"),
        "--max-model-len", str(max_model_len(run.inputs.get("traffic") or {})),
    ]  # fmt: skip
    if result.pp > 1:
        args += ["--pipeline-parallel-size", str(result.pp)]
    if result.ep > 1:
        args += ["--enable-expert-parallel"]
    if result.precision == "fp8":
        args += ["--quantization", "fp8"]  # online fp8 from a bf16 checkpoint
    return args


def _volume(source: str) -> dict:
    """Where the weights come from: a node-local directory (NVMe, page cache) or scratch."""
    if source in ("nvme", "page_cache"):
        return {"name": "weights", "hostPath": {"path": "/mnt/models", "type": "DirectoryOrCreate"}}
    return {"name": "weights", "emptyDir": {}}


def nodes_per_replica(gpus_per_replica: int, gpus_per_node: int) -> int:
    """Pods (one per node) of one replica: the fewest nodes that hold its GPUs in equal
    shares, ``min n >= ceil(g / per_node)`` with ``g % n == 0`` (1 when it fits a node)."""
    if not gpus_per_node or gpus_per_replica <= gpus_per_node:
        return 1
    n = math.ceil(gpus_per_replica / gpus_per_node)
    while gpus_per_replica % n:
        n += 1
    return n


def _pod_spec(vendor: str, gpu_name: str, gpus: int, weights_source: str, container: dict):
    resource = GPU_RESOURCE[vendor]
    return {
        # GPU feature discovery's product label; check yours with
        # kubectl get nodes -L nvidia.com/gpu.product
        "nodeSelector": {"nvidia.com/gpu.product": _dns_name(vendor, gpu_name)}
        if vendor == "nvidia"
        else {"amd.com/gpu.product-name": gpu_name},
        "tolerations": [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            container
            | {
                "resources": {"requests": {resource: gpus}, "limits": {resource: gpus}},
                "volumeMounts": [
                    {"name": "weights", "mountPath": WEIGHT_MOUNT},
                    {"name": "dshm", "mountPath": "/dev/shm"},
                ],
            }
        ],
        "volumes": [_volume(weights_source), {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }


def _probes(cold_start_s: float) -> dict:
    """Readiness tied to the engine's warm-up: ``/health`` answers once the engine has loaded,
    captured its graphs and warmed up; the startup probe allows twice the cold start."""
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5}
    startup_failures = max(int(math.ceil(2 * cold_start_s / 10)), 3)
    return {
        "startupProbe": probe | {"periodSeconds": 10, "failureThreshold": startup_failures},
        "readinessProbe": probe | {"failureThreshold": 3},
        "livenessProbe": probe | {"periodSeconds": 15, "failureThreshold": 4},
    }


def _metadata(run: SizingRun, result, name: str, cold: dict, labels: dict) -> dict:
    return {
        "name": name,
        "labels": labels,
        "annotations": {
            "headroom/run": str(run.pk),
            "headroom/candidate": result.candidate_key,
            "headroom/cold-start-s": f"{cold['total']:.1f}",
        },
    }


def deployment(
    run: SizingRun, result, entry: dict, model_id: str, vendor: str, gpu_name: str
) -> dict:
    name = _dns_name(result.model_name, entry["gpu"])
    gpus = int(result.gpus_per_replica)
    cold = entry["cold_start_s"]
    policy = entry["autoscaling"]
    labels = {"app": name}
    container = {
        "name": "vllm",
        "image": IMAGES[vendor],
        "args": vllm_args(run, result, model_id),
        "ports": [{"name": "http", "containerPort": HTTP_PORT}],
        **_probes(cold["total"]),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(run, result, name, cold, labels),
        "spec": {
            "replicas": max(policy["min_replicas"], 1),
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": _pod_spec(
                    vendor, gpu_name, gpus, cold.get("weights_source", ""), container
                ),
            },
        },
    }


def leader_worker_set(
    run: SizingRun, result, entry: dict, model_id: str, vendor: str, gpu_name: str, nodes: int
) -> dict:
    """One replica = one group of ``nodes`` pods (leader + workers), Ray across them."""
    name = _dns_name(result.model_name, entry["gpu"])
    gpus_per_pod = int(result.gpus_per_replica) // nodes
    cold = entry["cold_start_s"]
    policy = entry["autoscaling"]
    source = cold.get("weights_source", "")
    serve = shlex.join([*SERVER, *vllm_args(run, result, model_id)])
    leader = {
        "name": "vllm-leader",
        "image": IMAGES[vendor],
        "command": ["sh", "-c"],
        "args": [
            f"bash {RAY_SCRIPT} leader --ray_cluster_size=$(LWS_GROUP_SIZE); "
            f"{serve} --distributed-executor-backend ray"
        ],
        "ports": [{"name": "http", "containerPort": HTTP_PORT}],
        **_probes(cold["total"]),
    }
    worker = {
        "name": "vllm-worker",
        "image": IMAGES[vendor],
        "command": ["sh", "-c"],
        "args": [f"bash {RAY_SCRIPT} worker --ray_address=$(LWS_LEADER_ADDRESS)"],
    }
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": _metadata(run, result, name, cold, {"app": name}),
        "spec": {
            "replicas": max(policy["min_replicas"], 1),
            "leaderWorkerTemplate": {
                "size": nodes,
                # a lost pod loses the replica's shards: restart the whole group
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": {"app": name, "role": "leader"}},
                    "spec": _pod_spec(vendor, gpu_name, gpus_per_pod, source, leader),
                },
                "workerTemplate": {
                    "metadata": {"labels": {"app": name, "role": "worker"}},
                    "spec": _pod_spec(vendor, gpu_name, gpus_per_pod, source, worker),
                },
            },
        },
    }


def service(name: str, leaders_only: bool = False) -> dict:
    selector = {"app": name, "role": "leader"} if leaders_only else {"app": name}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }


def _behavior(policy: dict) -> dict:
    up = int(policy["scale_up_cooldown_s"])
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            # at most the peak's replicas per cooldown: no second order before the first boots
            "policies": [{"type": "Pods", "value": policy["max_replicas"], "periodSeconds": up}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": int(policy["scale_down_cooldown_s"]),
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        },
    }


def _target(name: str, kind: str) -> dict:
    api = LWS_API if kind == "LeaderWorkerSet" else "apps/v1"
    return {"apiVersion": api, "kind": kind, "name": name}


def hpa(name: str, policy: dict, kind: str = "Deployment") -> dict:
    """The warm pool cannot be a constant on top of an HPA's count; it becomes the floor."""
    floor = max(policy["min_replicas"], 1) + policy["warm_pool_replicas"]
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": _target(name, kind),
            "minReplicas": floor,
            "maxReplicas": max(policy["max_replicas"] + policy["warm_pool_replicas"], floor),
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        # vLLM's vllm:num_requests_running, as a Prometheus adapter exposes it
                        "metric": {"name": "vllm_num_requests_running"},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": f"{policy['in_flight_target']:.3f}",
                        },
                    },
                }
            ],
            "behavior": _behavior(policy),
        },
    }


def keda(name: str, policy: dict, prometheus: str, kind: str = "Deployment") -> dict:
    """Desired = ceil(running / target) + warm: the formula adds warm x target requests.
    A LeaderWorkerSet's leaders are ``<name>-<group>`` (workers ``<name>-<group>-<i>`` serve
    no HTTP); the query counts the leaders only."""
    target = policy["in_flight_target"]
    warm = policy["warm_pool_replicas"]
    pods = f"{name}-[0-9]+" if kind == "LeaderWorkerSet" else f"{name}-.*"
    query = f'sum(vllm:num_requests_running{{pod=~"{pods}"}})'
    spec = {
        "scaleTargetRef": _target(name, kind) if kind != "Deployment" else {"name": name},
        "minReplicaCount": policy["min_replicas"],
        "maxReplicaCount": policy["max_replicas"] + warm,
        "cooldownPeriod": int(policy["scale_down_cooldown_s"]),
        "triggers": [
            {
                "type": "prometheus",
                "name": "running",
                "metadata": {
                    "serverAddress": prometheus,
                    "query": query,
                    "threshold": f"{target:.3f}",
                },
            }
        ],
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(policy)}},
    }
    if warm:
        spec["advanced"]["scalingModifiers"] = {
            "formula": f"running + {warm * target:.3f}",
            "target": f"{target:.3f}",
            "metricType": "AverageValue",
        }
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name},
        "spec": spec,
    }


def deploy_yaml(run: SizingRun, gpu: str, autoscaler: str = "") -> str:
    """The YAML (three documents) for the run's recommendation on ``gpu``."""
    from fleets.models import GpuSku, ModelArchitecture

    entry = _entry(run, gpu)
    if autoscaler and autoscaler not in AUTOSCALERS:
        raise DeployError("autoscaler", f"one of {', '.join(AUTOSCALERS)}, got {autoscaler!r}")
    policy = entry["autoscaling"]
    result = run.results.get(candidate_key=entry["recommended"])
    if result.mode == "disagg":  # two pools, a KV connector and a router: not generated yet
        raise DeployError(
            "gpu",
            f"the recommendation on {entry.get('gpu_name', gpu)} is a disaggregated deployment "
            f"({result.prefill_workers} prefill + {result.decode_workers} decode workers); "
            "manifests are generated for aggregated replicas only: deploy it with your "
            "engine's prefill/decode tooling (NVIDIA Dynamo, llm-d), or set "
            "serving.disaggregation to false for an aggregated recommendation",
        )
    model_slug = next(
        (c["model"] for c in run.inputs["candidates"] if c["key"] == result.candidate_key), ""
    )
    model = ModelArchitecture.objects.filter(slug=model_slug).values_list("hf_id", flat=True)
    model_id = next(iter(model), "") or result.model_name
    sku = GpuSku.objects.filter(slug=gpu).values_list("vendor", flat=True)
    vendor = "amd" if next(iter(sku), "").lower() == "amd" else "nvidia"
    kind = autoscaler or (
        "keda" if policy["min_replicas"] == 0 or policy["warm_pool_replicas"] else "hpa"
    )
    gpu_name = entry.get("gpu_name", gpu)
    per_node = (run.inputs.get("gpus") or {}).get(gpu, {}).get("gpus_per_node") or 0
    nodes = nodes_per_replica(int(result.gpus_per_replica), int(per_node))
    if nodes > 1:
        doc = leader_worker_set(run, result, entry, model_id, vendor, gpu_name, nodes)
    else:
        doc = deployment(run, result, entry, model_id, vendor, gpu_name)
    name, workload = doc["metadata"]["name"], doc["kind"]
    scaler = (
        keda(name, policy, PROMETHEUS, workload) if kind == "keda" else hpa(name, policy, workload)
    )
    header = (
        f"# Headroom run {run.pk}: {result.model_name} on {gpu_name}, "
        f"{result.candidate_key}\n"
        f"# cold start {entry['cold_start_s']['total']:.0f} s; scale on in-flight requests "
        f"per pod (target {policy['in_flight_target']:.1f}); warm pool "
        f"{policy['warm_pool_replicas']}; a starting point: check the node labels, the image "
        "tag and the Prometheus address\n"
    )
    if nodes > 1:
        header += (
            f"# one replica spans {nodes} nodes ({result.gpus_per_replica} GPUs, "
            f"{int(result.gpus_per_replica) // nodes} per node): a LeaderWorkerSet with Ray "
            "across the group; install the LeaderWorkerSet controller first\n"
        )
    body = yaml.safe_dump_all([doc, service(name, nodes > 1), scaler], sort_keys=False)
    return header + body
