"""What a cluster and a platform team's security review ask of every rendered overlay: every
object in the overlay's namespace; every reference (Secrets and ConfigMaps by their hashed
names, PVCs, ServiceAccounts, selectors, in-cluster URLs) resolving there; every pod, Ray's
included, under Pod Security `restricted`; a default deny of ingress with explicit allows, Ray
reachable only from the trainer and the jobs; the production overlay's collector and its
Prometheus Operator monitors. The checks themselves are in `manifests.py`."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest

from tests.deploy.manifests import (
    PodTemplate,
    namespace_problems,
    pod_security_problems,
    pod_templates,
    reference_problems,
)
from tests.deploy.test_deploy import OVERLAYS, render

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
