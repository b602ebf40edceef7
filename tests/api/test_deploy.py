"""GET /api/v1/runs/{id}/deploy/?gpu=<slug>: YAML a platform engineer can start from, each
field the plan's."""

import math
import shlex

import pytest
import yaml

from planner import deploy, services
from tests.factories import make_scenario


@pytest.fixture
def run(catalog, user):
    scenario = make_scenario(
        owner=user,
        models=["Llama-3.1-70B-Instruct"],
        gpus=["H100"],
        precisions=["fp8"],
        peak_rps=40,
        mean_rps=12,
        burst_factor=1.3,
        cold_start={"weights_source": "nvme"},
        serving={"disaggregation": False},  # manifests are for aggregated replicas
    )
    return services.sizing_run_start(scenario=scenario)


def test_a_disaggregated_recommendation_is_refused_naming_the_gpu(api, catalog, user):
    # given a run whose H100 answer is a disaggregated deployment (separate pools)
    scenario = make_scenario(
        owner=user, models=["Llama-3.1-70B-Instruct"], gpus=["H100"], precisions=["fp8"],
        peak_rps=40, mean_rps=12,
    )  # fmt: skip
    run = services.sizing_run_start(scenario=scenario)
    entry = run.summary["per_gpu"][0]
    assert run.results.get(candidate_key=entry["recommended"]).mode == "disagg"
    # when its manifests are asked for
    response = api.get(f"/api/v1/runs/{run.pk}/deploy/", {"gpu": "h100_sxm"})
    # then the request is refused naming the parameter and saying what to do instead
    assert response.status_code == 400
    assert "gpu" in response.json()["errors"]
    assert "disaggregation" in str(response.json()["errors"]["gpu"])


BAD = [
    ({}, "gpu"),
    ({"gpu": "b200"}, "gpu"),
    ({"gpu": "h100_sxm", "autoscaler": "x"}, "autoscaler"),
]


def _docs(response):
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("application/yaml")
    return {d["kind"]: d for d in yaml.safe_load_all(response.content.decode())}


def test_yaml_fields_are_the_plans(api, run):
    entry = run.summary["per_gpu"][0]
    result = run.results.get(candidate_key=entry["recommended"])
    docs = _docs(api.get(f"/api/v1/runs/{run.pk}/deploy/", {"gpu": "h100_sxm"}))
    assert set(docs) == {"Deployment", "Service", "ScaledObject"}  # a warm pool -> KEDA
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    gpus = result.gpus_per_replica
    assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
    assert container["resources"]["requests"]["nvidia.com/gpu"] == gpus
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert "nvidia.com/gpu.product" in pod["nodeSelector"]
    args = container["args"]

    def arg(name):
        return args[args.index(name) + 1]

    engine = run.inputs["engine"]
    traffic = run.inputs["traffic"]
    assert int(arg("--tensor-parallel-size")) == result.tp
    assert int(arg("--max-num-seqs")) == result.batch
    assert float(arg("--gpu-memory-utilization")) == engine["gpu_memory_utilization"]
    assert int(arg("--max-num-batched-tokens")) == engine["max_num_batched_tokens"]
    assert arg("--kv-cache-dtype") == ("fp8" if result.kv_precision == "fp8" else "auto")
    p95 = traffic["prompt_tokens_p95"] + traffic["output_tokens_p95"]
    assert int(arg("--max-model-len")) == p95
    from fleets.models import ModelArchitecture

    assert arg("--model") == ModelArchitecture.objects.get(slug="llama-3.1-70b").hf_id
    # readiness after warm-up; the startup probe allows twice the cold start
    startup = container["startupProbe"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    cold = entry["cold_start_s"]["total"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 2 * cold
    assert {v["name"] for v in pod["volumes"]} == {"weights", "dshm"}
    assert "hostPath" in pod["volumes"][0]  # weights from node-local NVMe
    assert (
        docs["Service"]["spec"]["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    )
    # the autoscaler: the derived signal, thresholds, cooldowns, min/max replicas
    policy = entry["autoscaling"]
    keda = docs["ScaledObject"]["spec"]
    (trigger,) = keda["triggers"]
    assert "vllm:num_requests_running" in trigger["metadata"]["query"]
    assert float(trigger["metadata"]["threshold"]) == pytest.approx(
        policy["in_flight_target"], abs=1e-3
    )
    assert keda["minReplicaCount"] == policy["min_replicas"]
    assert keda["maxReplicaCount"] == policy["max_replicas"] + policy["warm_pool_replicas"]
    behavior = keda["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == policy["scale_down_cooldown_s"]
    assert behavior["scaleUp"]["policies"][0]["periodSeconds"] == policy["scale_up_cooldown_s"]
    assert policy["scale_up_cooldown_s"] >= math.floor(cold)
    warm = policy["warm_pool_replicas"]
    formula = keda["advanced"]["scalingModifiers"]["formula"]
    assert float(formula.split("+")[1]) == pytest.approx(warm * policy["in_flight_target"], 1e-3)


def test_hpa_on_request_and_bad_requests_name_the_parameter(api, run):
    # one run for both (each run costs seconds): an HPA on the same signal and thresholds
    url = f"/api/v1/runs/{run.pk}/deploy/"
    docs = _docs(api.get(url, {"gpu": "h100_sxm", "autoscaler": "hpa"}))
    hpa = docs["HorizontalPodAutoscaler"]["spec"]
    policy = run.summary["per_gpu"][0]["autoscaling"]
    target = hpa["metrics"][0]["pods"]["target"]["averageValue"]
    assert float(target) == pytest.approx(policy["in_flight_target"], abs=1e-3)
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    for params, field in BAD:
        response = api.get(url, params)
        assert response.status_code == 400
        assert field in response.json()["errors"]


def test_ui_button_downloads_the_same_yaml(client, run, user):
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/")
    assert f"/runs/{run.pk}/deploy/?gpu=h100_sxm" in page.content.decode()
    ui = client.get(f"/runs/{run.pk}/deploy/", {"gpu": "h100_sxm"})
    assert ui.status_code == 200
    assert ui.content.decode() == deploy.deploy_yaml(run, "h100_sxm")
    html = page.content.decode()
    # the worst burst checked with the simulator, beside the fluid model, and each default's
    # source beside it
    sim = run.summary["per_gpu"][0]["autoscaling"]["burst"]["simulated"]
    assert "Checked with the simulator" in html and f"{sim['requests']:,} requests" in html
    assert "Where the defaults come from" in html
    assert "https://www.cbre.com/insights/reports/north-america-data-center-trends-h2-2024" in html
    ids = {c["id"] for c in page.context["charts"]}
    assert {"chart-fleet-day", "chart-own-rent-api"} <= ids


#: (block, value, the field named, the limit said): negative bandwidth, 0 years, PUE < 1,
#: spot share outside [0, 1] and the rest of the issue's bad input
BAD_BLOCKS = [
    ("ownership", {"pue": 0.9}, "ownership.pue", "at least 1"),
    ("ownership", {"depreciation_years": 0}, "ownership.depreciation_years", "greater than 0"),
    ("ownership", {"usd_per_kwh": -0.1}, "ownership.usd_per_kwh", "at least 0"),
    ("ownership", {"cost_of_capital": 1.5}, "ownership.cost_of_capital", "at most 1"),
    ("cold_start", {"weights_gb_s": -2}, "cold_start.weights_gb_s", "at least 0.01"),
    ("cold_start", {"registry_gb_s": -1}, "cold_start.registry_gb_s", "at least 0.01"),
    ("cold_start", {"weights_source": "tape"}, "cold_start.weights_source", "one of"),
    ("cold_start", {"image_cached": "maybe"}, "cold_start.image_cached", "valid boolean"),
    ("autoscaling", {"spot_share": 1.5}, "autoscaling.spot_share", "at most 1"),
    ("autoscaling", {"spot_share": -0.1}, "autoscaling.spot_share", "at least 0"),
    ("autoscaling", {"burst_s": 0}, "autoscaling.burst_s", "greater than 0"),
    ("autoscaling", {"min_replicas": -1}, "autoscaling.min_replicas", "at least 0"),
    (
        "autoscaling",
        {"spot_interruptions_per_hour": -1},
        "autoscaling.spot_interruptions_per_hour",
        "at least 0",
    ),
]


def test_api_blocks_round_trip_and_bad_values_name_the_field(catalog, api):
    from tests.api.test_api import body

    data = body()
    data["cold_start"] = {"weights_source": "object_store", "image_cached": True}
    data["ownership"] = {"pue": 1.2, "depreciation_years": 4}
    created = api.post("/api/v1/scenarios/", data, format="json")
    assert created.status_code == 201, created.json()
    back = api.get(f"/api/v1/scenarios/{created.json()['id']}/").json()
    assert back["cold_start"] == data["cold_start"] and back["ownership"] == data["ownership"]
    from planner.models import Scenario

    saved = Scenario.objects.count()
    for block, value, field, limit in BAD_BLOCKS:
        bad = body()
        bad[block] = value
        answer = api.post("/api/v1/scenarios/", bad, format="json")
        assert answer.status_code == 400
        errors = answer.json()["errors"]
        assert field in errors, answer.json()
        assert limit in " ".join(errors[field])
        # nothing saved, and an update with the same value leaves the stored block alone
        assert Scenario.objects.count() == saved
        url = f"/api/v1/scenarios/{created.json()['id']}/"
        patched = api.patch(url, {block: value}, format="json")
        assert patched.status_code == 400 and field in patched.json()["errors"]
        assert api.get(url).json()[block] == data.get(block, {}), block


def test_multi_node_replica_is_a_leader_worker_set(api, catalog, user):
    # given a replica of TP4 x PP2 = 8 GPUs on GB200 trays of 4 GPUs: it spans 2 nodes
    scenario = make_scenario(
        owner=user,
        models=["llama-3.1-8b"],
        gpus=["GB200"],
        precisions=["fp8"],
        tp_options=[4],
        pp_options=[2],
        autoscaling={"burst_ramp_rps_per_s": 0.5},
    )
    run = services.sizing_run_start(scenario=scenario)
    entry = run.summary["per_gpu"][0]
    result = run.results.get(candidate_key=entry["recommended"])
    assert (result.tp, result.pp, result.gpus_per_replica) == (4, 2, 8)
    assert run.inputs["gpus"]["gb200"]["gpus_per_node"] == 4
    # when the deployment is asked for
    response = api.get(f"/api/v1/runs/{run.pk}/deploy/", {"gpu": "gb200"})
    text = response.content.decode()
    docs = _docs(response)
    # then a LeaderWorkerSet of 2 pods per replica (one per node), 4 GPUs each, 8 in all
    assert set(docs) == {"LeaderWorkerSet", "Service", "ScaledObject"}
    assert "spans 2 nodes" in text
    lws = docs["LeaderWorkerSet"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    policy = entry["autoscaling"]
    assert lws["spec"]["replicas"] == max(policy["min_replicas"], 1)
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
    assert group["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]
    for pod in (leader, worker):
        (container,) = pod["containers"]
        assert container["resources"]["requests"]["nvidia.com/gpu"] == 4
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
        assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "nvidia-gb200"}
        assert {v["name"] for v in pod["volumes"]} == {"weights", "dshm"}
    # the leader and size - 1 workers hold the replica's GPUs
    assert 4 * group["size"] == result.gpus_per_replica
    # the leader runs the Ray head, then the server with the engine arguments the sizing
    # assumed; the worker joins the leader's Ray cluster
    (lead,) = leader["containers"]
    (work,) = worker["containers"]
    script = lead["args"][0]
    assert "multi-node-serving.sh leader --ray_cluster_size=$(LWS_GROUP_SIZE)" in script
    assert "multi-node-serving.sh worker --ray_address=$(LWS_LEADER_ADDRESS)" in work["args"][0]
    serve = shlex.split(script.split("; ", 1)[1])
    assert serve[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert serve[3:-2] == deploy.vllm_args(run, result, serve[serve.index("--model") + 1])
    assert serve[-2:] == ["--distributed-executor-backend", "ray"]

    def arg(name):
        return serve[serve.index(name) + 1]

    engine, traffic = run.inputs["engine"], run.inputs["traffic"]
    assert int(arg("--tensor-parallel-size")) == result.tp == 4
    assert int(arg("--pipeline-parallel-size")) == result.pp == 2
    assert int(arg("--max-num-seqs")) == result.batch
    assert float(arg("--gpu-memory-utilization")) == engine["gpu_memory_utilization"]
    assert int(arg("--max-num-batched-tokens")) == engine["max_num_batched_tokens"]
    assert (
        int(arg("--max-model-len")) == traffic["prompt_tokens_p95"] + traffic["output_tokens_p95"]
    )
    assert lead["readinessProbe"]["httpGet"]["path"] == "/health"
    startup = lead["startupProbe"]
    assert (
        startup["periodSeconds"] * startup["failureThreshold"] >= 2 * entry["cold_start_s"]["total"]
    )
    assert "readinessProbe" not in work  # workers serve no HTTP
    # the Service reaches the leaders; the autoscaler scales whole groups on their signal
    assert docs["Service"]["spec"]["selector"] == {"app": lws["metadata"]["name"], "role": "leader"}
    assert group["leaderTemplate"]["metadata"]["labels"]["role"] == "leader"
    keda = docs["ScaledObject"]["spec"]
    assert keda["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": lws["metadata"]["name"],
    }
    (trigger,) = keda["triggers"]
    assert f'pod=~"{lws["metadata"]["name"]}-[0-9]+"' in trigger["metadata"]["query"]
    assert float(trigger["metadata"]["threshold"]) == pytest.approx(
        policy["in_flight_target"], abs=1e-3
    )
    assert keda["maxReplicaCount"] == policy["max_replicas"] + policy["warm_pool_replicas"]
    # an HPA on request targets the LeaderWorkerSet too
    hpa = _docs(api.get(f"/api/v1/runs/{run.pk}/deploy/", {"gpu": "gb200", "autoscaler": "hpa"}))
    assert hpa["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"


@pytest.mark.parametrize(
    "gpus, per_node, nodes", [(8, 8, 1), (4, 8, 1), (16, 8, 2), (8, 4, 2), (12, 8, 2), (10, 4, 5)]
)
def test_nodes_per_replica(gpus, per_node, nodes):
    # the fewest nodes holding the replica's GPUs in equal shares: 12 on 8-GPU nodes -> 2 x 6;
    # 10 on 4-GPU nodes -> 3 would not split evenly, 5 x 2 does
    assert deploy.nodes_per_replica(gpus, per_node) == nodes
