"""What a cluster and a platform team's security review ask of every rendered overlay: every
object in the overlay's namespace; every reference (Secrets and ConfigMaps by their hashed
names, PVCs, ServiceAccounts, selectors, in-cluster URLs) resolving there; every pod, Ray's
included, under Pod Security `restricted`; a default deny of ingress with explicit allows, Ray
reachable only from the trainer and the jobs; the production overlay's collector and its
Prometheus Operator monitors. The checks themselves are in `manifests.py`."""

from __future__ import annotations

import copy
import re
from functools import cache
from typing import Any

import pytest
import yaml

from tests.deploy.manifests import (
    Peer,
    PodTemplate,
    ingress_allowed,
    namespace_problems,
    pod_security_problems,
    pod_templates,
    reference_problems,
)
from tests.deploy.test_deploy import DEPLOY, OVERLAYS, render

NAMESPACE = "akka"


@cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(overlay))


def docs_of(overlay: str) -> list[dict[str, Any]]:
    return copy.deepcopy(list(rendered(overlay)))


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def pod(docs: list[dict[str, Any]], owner: str) -> PodTemplate:
    (found,) = [p for p in pod_templates(docs) if p.owner == owner]
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_in_the_overlays_namespace(overlay: str) -> None:
    assert namespace_problems(docs_of(overlay), NAMESPACE) == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_reference_resolves_within_its_namespace(overlay: str) -> None:
    assert reference_problems(docs_of(overlay)) == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_meets_pod_security_restricted(overlay: str) -> None:
    docs = docs_of(overlay)
    assert pod_security_problems(docs) == []
    labels = one(docs, "Namespace", NAMESPACE)["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"


def test_the_checks_name_what_a_broken_overlay_gets_wrong() -> None:
    """The checks above can fail: a Secret referred to by its unhashed name, an object without
    its namespace and a container that keeps its capabilities are each named."""
    docs = docs_of("production")
    deployment = one(docs, "Deployment", "akka-trainer")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    env["AKKA_TRAINER__DATABASE__URL"]["valueFrom"]["secretKeyRef"]["name"] = (
        "akka-trainer-database"
    )
    del one(docs, "PrometheusRule", "akka-training-stalled-runs")["metadata"]["namespace"]
    cluster = one(docs, "RayCluster", "akka-ray")
    del cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["securityContext"][
        "capabilities"
    ]
    assert reference_problems(docs) == [
        "Deployment/akka-trainer container trainer refers to Secret 'akka-trainer-database', "
        "which is not in 'akka'"
    ]
    assert namespace_problems(docs, NAMESPACE) == [
        "PrometheusRule/akka-training-stalled-runs is in namespace '(none)', not 'akka'"
    ]
    assert pod_security_problems(docs) == [
        "RayCluster/akka-ray head container ray-head does not drop ALL capabilities"
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ingress_is_denied_by_default_and_the_trainer_api_is_open(overlay: str) -> None:
    docs = docs_of(overlay)
    default = [
        d
        for d in docs
        if d["kind"] == "NetworkPolicy"
        and d["spec"]["podSelector"] == {}
        and d["spec"]["policyTypes"] == ["Ingress"]
        and not d["spec"].get("ingress")
    ]
    assert default, "no default deny of ingress"
    trainer = pod(docs, "Deployment/akka-trainer")
    stranger = Peer(NAMESPACE, {"app": "something-else"})
    elsewhere = Peer("ingress-nginx", {"app": "ingress-nginx"})
    # Users (through an ingress controller or a port-forward) and the jobs reach the API.
    assert ingress_allowed(docs, elsewhere, trainer, 9001)
    assert ingress_allowed(docs, stranger, trainer, 9001)
    # Nothing else of the trainer's pod is open.
    assert not ingress_allowed(docs, stranger, trainer, 8080)
    assert not ingress_allowed(docs, elsewhere, trainer, 22)


def test_ray_is_reachable_only_from_the_trainer_and_its_own_pods() -> None:
    """Ray runs without authentication (RAY_AUTH_MODE=disabled): whoever reaches its dashboard
    runs code on the GPUs. Only the trainer (it submits jobs) and Ray's own pods (the jobs, and
    the nodes talking to each other) reach it; Prometheus reaches the metrics port only."""
    docs = docs_of("production")
    trainer = pod(docs, "Deployment/akka-trainer")
    head = pod(docs, "RayCluster/akka-ray head")
    worker = pod(docs, "RayCluster/akka-ray group h100")
    from_trainer = Peer(NAMESPACE, trainer.labels)
    from_head = Peer(NAMESPACE, head.labels)
    from_worker = Peer(NAMESPACE, worker.labels)
    stranger = Peer(NAMESPACE, {"app": "something-else"})
    elsewhere = Peer("default", {"app": "something-else"})
    prometheus = Peer("monitoring", {"app.kubernetes.io/name": "prometheus"})
    for port in (8265, 6379, 10001):
        assert ingress_allowed(docs, from_trainer, head, port)
        assert ingress_allowed(docs, from_worker, head, port)
        assert not ingress_allowed(docs, stranger, head, port)
        assert not ingress_allowed(docs, elsewhere, head, port)
        assert not ingress_allowed(docs, prometheus, head, port)
    # Ray's nodes talk on ports of their own choosing.
    assert ingress_allowed(docs, from_head, worker, 43210)
    assert ingress_allowed(docs, from_worker, worker, 43210)
    assert not ingress_allowed(docs, stranger, worker, 43210)
    # The jobs (in Ray's pods) report to the trainer.
    assert ingress_allowed(docs, from_worker, trainer, 9001)
    for ray_pod in (head, worker):
        assert ingress_allowed(docs, prometheus, ray_pod, 8080)
        assert not ingress_allowed(docs, stranger, ray_pod, 8080)


def test_the_production_overlay_runs_the_collector_with_the_repositorys_config() -> None:
    docs = docs_of("production")
    collector = one(docs, "Deployment", "otel-collector")
    spec = collector["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if "configMap" in volumes[m["name"]]]
    config_map = one(docs, "ConfigMap", volumes[mount["name"]]["configMap"]["name"])
    (key,) = config_map["data"]
    # The ConfigMap holds deploy/otel/collector.yaml itself, and the collector reads it.
    assert config_map["data"][key] == (DEPLOY / "otel" / "collector.yaml").read_text()
    assert f"--config={mount['mountPath']}/{key}" in container["args"]
    # What the config takes from the environment is set.
    wanted = set(re.findall(r"\$\{env:(\w+)\}", config_map["data"][key]))
    assert wanted == {"TRACES_OTLP_ENDPOINT"}
    assert wanted <= {e["name"] for e in container["env"]}
    # The trainer (and, through it, each job) sends to the collector's Service.
    settings = yaml.safe_load(
        next(
            d
            for d in docs
            if d["kind"] == "ConfigMap"
            and d["metadata"]["name"].startswith("akka-trainer-settings")
        )["data"]["settings.yaml"]
    )
    endpoint = settings["trainer"]["telemetry"]["collector-endpoint"]
    assert endpoint == f"http://otel-collector.{NAMESPACE}.svc:4318"
    service = one(docs, "Service", "otel-collector")
    assert 4318 in {p["port"] for p in service["spec"]["ports"]}
    # Only the trainer and the jobs send to it; Prometheus scrapes it.
    target = pod(docs, "Deployment/otel-collector")
    trainer = pod(docs, "Deployment/akka-trainer")
    worker = pod(docs, "RayCluster/akka-ray group h100")
    prometheus = Peer("monitoring", {"app.kubernetes.io/name": "prometheus"})
    stranger = Peer(NAMESPACE, {"app": "something-else"})
    assert ingress_allowed(docs, Peer(NAMESPACE, trainer.labels), target, 4318)
    assert ingress_allowed(docs, Peer(NAMESPACE, worker.labels), target, 4318)
    assert not ingress_allowed(docs, stranger, target, 4318)
    assert ingress_allowed(docs, prometheus, target, 8889)
    assert not ingress_allowed(docs, stranger, target, 8889)


def test_the_production_overlay_has_the_prometheus_operator_scrape_the_metrics() -> None:
    """The trainer sends its metrics, and the jobs theirs, to the collector (so its `/metrics`
    answers 404): a ServiceMonitor scrapes the collector's Prometheus exporter, and a PodMonitor
    scrapes each Ray node's metrics port. Both carry the PrometheusRule's `release` label."""
    docs = docs_of("production")
    (service_monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    (endpoint,) = service_monitor["spec"]["endpoints"]
    service = one(docs, "Service", "otel-collector")
    (metrics,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert metrics["port"] == 8889
    (pod_monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    for group in ("head", "group h100"):
        labels = pod(docs, f"RayCluster/akka-ray {group}").labels
        assert all(
            labels.get(k) == v for k, v in pod_monitor["spec"]["selector"]["matchLabels"].items()
        )
    rule = one(docs, "PrometheusRule", "akka-training-stalled-runs")
    for monitor in (service_monitor, pod_monitor):
        assert monitor["metadata"]["labels"]["release"] == rule["metadata"]["labels"]["release"]
