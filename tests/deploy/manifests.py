"""Checks on rendered Kubernetes objects, as a cluster would apply them: each returns the
problems it finds, one sentence each, so that a test asserts an empty list and a failure names
every object at fault.

- `namespace_problems`: every namespaced object carries the overlay's namespace.
- `reference_problems`: every name an object refers to is an object rendered in its namespace
  (Secrets, ConfigMaps and their keys, PVCs, ServiceAccounts, volumes of a pod), and every
  selector (a workload's, a Service's, a PodDisruptionBudget's, a NetworkPolicy's, a
  ServiceMonitor's or PodMonitor's) selects something rendered, on ports that exist; the
  in-cluster URLs in ConfigMaps name a Service of the namespace and one of its ports.
- `pod_security_problems`: every pod template meets the Pod Security `restricted` profile.
- `ingress_allowed`: whether the rendered NetworkPolicies let a pod reach another's port.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Doc = dict[str, Any]

# Kinds that live outside any namespace; every other kind rendered here is namespaced.
CLUSTER_KINDS = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "IngressClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
# The volume types the restricted profile allows.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SERVICE_URL = re.compile(r"\bhttps?://([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.cluster\.local)?:(\d+)")


@dataclass(frozen=True)
class PodTemplate:
    """A pod as a workload will create it: where it comes from, its namespace, labels, spec."""

    owner: str
    namespace: str
    labels: dict[str, str]
    spec: Doc


def name_of(doc: Doc) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def namespace_of(doc: Doc) -> str:
    return str(doc["metadata"].get("namespace", ""))


def pod_templates(docs: list[Doc]) -> Iterator[PodTemplate]:
    for doc in docs:
        kind, spec = doc["kind"], doc.get("spec") or {}
        templates: list[tuple[str, Doc]] = []
        if kind in WORKLOADS:
            templates = [(name_of(doc), spec["template"])]
        elif kind == "CronJob":
            templates = [(name_of(doc), spec["jobTemplate"]["spec"]["template"])]
        elif kind == "Pod":
            templates = [(name_of(doc), doc)]
        elif kind == "RayCluster":
            templates = [(f"{name_of(doc)} head", spec["headGroupSpec"]["template"])]
            templates += [
                (f"{name_of(doc)} group {group['groupName']}", group["template"])
                for group in spec.get("workerGroupSpecs", [])
            ]
        for owner, template in templates:
            labels = (template.get("metadata") or {}).get("labels") or {}
            yield PodTemplate(owner, namespace_of(doc), dict(labels), template["spec"])


def containers(spec: Doc) -> list[Doc]:
    return [
        *spec.get("initContainers", []),
        *spec.get("containers", []),
        *spec.get("ephemeralContainers", []),
    ]


def matches(selector: Doc | None, labels: dict[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions) against a set of labels."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def container_ports(spec: Doc) -> list[Doc]:
    return [p for c in spec.get("containers", []) for p in c.get("ports", [])]


def exposes(pod: PodTemplate, port: int | str) -> bool:
    """Whether a pod has a container port of this number or name."""
    return any(port in (p["containerPort"], p.get("name")) for p in container_ports(pod.spec))


def namespace_problems(docs: list[Doc], namespace: str) -> list[str]:
    problems = []
    for doc in docs:
        if doc["kind"] in CLUSTER_KINDS:
            if "namespace" in doc["metadata"]:
                problems.append(f"{name_of(doc)} is cluster-wide but names a namespace")
        elif namespace_of(doc) != namespace:
            problems.append(
                f"{name_of(doc)} is in namespace {namespace_of(doc) or '(none)'!r}, "
                f"not {namespace!r}"
            )
    return problems


def reference_problems(docs: list[Doc]) -> list[str]:
    """Every reference resolves within its object's namespace."""
    objects = {(d["kind"], namespace_of(d), d["metadata"]["name"]): d for d in docs}
    pods = list(pod_templates(docs))
    problems: list[str] = []

    def find(kind: str, namespace: str, name: str, by: str) -> Doc | None:
        found = objects.get((kind, namespace, name))
        if found is None:
            problems.append(f"{by} refers to {kind} {name!r}, which is not in {namespace!r}")
        return found

    def has_key(kind: str, namespace: str, name: str, key: str, by: str) -> None:
        found = find(kind, namespace, name, by)
        if found is not None and key not in {
            **(found.get("data") or {}),
            **(found.get("stringData") or {}),
        }:
            problems.append(f"{by} refers to key {key!r} of {kind} {name!r}, which has none")

    def selected(namespace: str, selector: Doc | None) -> list[PodTemplate]:
        return [p for p in pods if p.namespace == namespace and matches(selector, p.labels)]

    for pod in pods:
        ns, by, spec = pod.namespace, pod.owner, pod.spec
        if "serviceAccountName" in spec:
            find("ServiceAccount", ns, spec["serviceAccountName"], by)
        for secret in spec.get("imagePullSecrets", []):
            find("Secret", ns, secret["name"], by)
        volume_names = set()
        for volume in spec.get("volumes", []):
            volume_names.add(volume["name"])
            sources = [volume, *[s for s in (volume.get("projected") or {}).get("sources", [])]]
            for source in sources:
                if "secret" in source:
                    secret = source["secret"]
                    name = secret.get("secretName", secret.get("name"))
                    for item in secret.get("items", []):
                        has_key("Secret", ns, name, item["key"], by)
                    find("Secret", ns, name, by)
                if "configMap" in source:
                    config = source["configMap"]
                    for item in config.get("items", []):
                        has_key("ConfigMap", ns, config["name"], item["key"], by)
                    find("ConfigMap", ns, config["name"], by)
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                find("PersistentVolumeClaim", ns, claim, by)
        for container in containers(spec):
            where = f"{by} container {container['name']}"
            for mount in container.get("volumeMounts", []):
                if mount["name"] not in volume_names:
                    problems.append(f"{where} mounts volume {mount['name']!r}, which it lacks")
            for env in container.get("env", []):
                source = env.get("valueFrom") or {}
                for field, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                    if field in source and not source[field].get("optional"):
                        ref = source[field]
                        has_key(kind, ns, ref["name"], ref["key"], where)
            for env_from in container.get("envFrom", []):
                for field, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                    if field in env_from and not env_from[field].get("optional"):
                        find(kind, ns, env_from[field]["name"], where)

    for doc in docs:
        ns, by, spec = namespace_of(doc), name_of(doc), doc.get("spec") or {}
        kind = doc["kind"]
        if kind in WORKLOADS and "selector" in spec:
            labels = spec["template"]["metadata"].get("labels") or {}
            if not matches(spec["selector"], labels):
                problems.append(f"{by}'s selector does not select its own pod template")
        if kind == "Service" and spec.get("selector"):
            targets = selected(ns, {"matchLabels": spec["selector"]})
            if not targets:
                problems.append(f"{by}'s selector {spec['selector']} selects no pod")
            for port in spec.get("ports", []):
                target = port.get("targetPort", port["port"])
                if targets and not any(exposes(p, target) for p in targets):
                    problems.append(f"{by} port {port['port']} targets {target!r}, not exposed")
        if kind == "PodDisruptionBudget" and not selected(ns, spec["selector"]):
            problems.append(f"{by}'s selector selects no pod")
        if kind == "NetworkPolicy":
            targets = selected(ns, spec["podSelector"])
            if not targets:
                problems.append(f"{by}'s podSelector selects no pod")
            for rule in spec.get("ingress", []):
                for peer in rule.get("from", []):
                    local = "podSelector" in peer and "namespaceSelector" not in peer
                    if local and not selected(ns, peer["podSelector"]):
                        problems.append(f"{by} allows traffic from pods that do not exist")
                for port in rule.get("ports", []):
                    if (
                        targets
                        and "port" in port
                        and not any(exposes(p, port["port"]) for p in targets)
                    ):
                        problems.append(f"{by} opens port {port['port']!r}, which no pod exposes")
        if kind in ("ServiceMonitor", "PodMonitor"):
            names = (spec.get("namespaceSelector") or {}).get("matchNames") or [ns]
            if kind == "ServiceMonitor":
                services = [
                    d
                    for d in docs
                    if d["kind"] == "Service"
                    and namespace_of(d) in names
                    and matches(spec["selector"], d["metadata"].get("labels") or {})
                ]
                if not services:
                    problems.append(f"{by}'s selector selects no Service")
                for endpoint in spec.get("endpoints", []):
                    port_names = {p.get("name") for s in services for p in s["spec"]["ports"]}
                    if services and endpoint.get("port") not in port_names:
                        problems.append(f"{by} scrapes port {endpoint.get('port')!r}: no such port")
            else:
                targets = [p for n in names for p in selected(n, spec["selector"])]
                if not targets:
                    problems.append(f"{by}'s selector selects no pod")
                for endpoint in spec.get("podMetricsEndpoints", []):
                    if targets and not any(exposes(p, endpoint.get("port", "")) for p in targets):
                        problems.append(f"{by} scrapes port {endpoint.get('port')!r}: no such port")
        if kind == "ConfigMap":
            for value in (doc.get("data") or {}).values():
                for host, url_ns, port in SERVICE_URL.findall(value):
                    if url_ns == ns and not serves(docs, ns, host, int(port)):
                        problems.append(
                            f"{by} names http://{host}.{url_ns}.svc:{port}, which no Service "
                            f"of {ns!r} serves"
                        )
    return problems


def serves(docs: list[Doc], namespace: str, host: str, port: int) -> bool:
    """A Service rendered in the namespace, or one a RayCluster's operator makes for its head
    (`NAME-head-svc`, on the head's container ports), answers on this port."""
    for doc in docs:
        if namespace_of(doc) != namespace:
            continue
        if doc["kind"] == "Service" and doc["metadata"]["name"] == host:
            return any(p["port"] == port for p in doc["spec"]["ports"])
        if doc["kind"] == "RayCluster" and f"{doc['metadata']['name']}-head-svc" == host:
            head = doc["spec"]["headGroupSpec"]["template"]["spec"]
            return any(p["containerPort"] == port for p in container_ports(head))
    return False


def pod_security_problems(docs: list[Doc]) -> list[str]:
    """The Pod Security Standards' `restricted` profile, field by field, for every pod."""
    problems = []
    for pod in pod_templates(docs):
        spec, by = pod.spec, pod.owner
        pod_context = spec.get("securityContext") or {}
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(field):
                problems.append(f"{by} sets {field}")
        for volume in spec.get("volumes", []):
            kinds = set(volume) - {"name"}
            if not kinds <= RESTRICTED_VOLUMES:
                problems.append(f"{by} volume {volume['name']} is {sorted(kinds)}")
        for container in containers(spec):
            where = f"{by} container {container['name']}"
            context = container.get("securityContext") or {}

            def setting(field: str, context: Doc = context, pod_context: Doc = pod_context) -> Any:
                return context.get(field, pod_context.get(field))

            if context.get("privileged"):
                problems.append(f"{where} is privileged")
            if context.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where} does not set allowPrivilegeEscalation: false")
            capabilities = context.get("capabilities") or {}
            if "ALL" not in (capabilities.get("drop") or []):
                problems.append(f"{where} does not drop ALL capabilities")
            if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
                problems.append(f"{where} adds capabilities {capabilities['add']}")
            if setting("runAsNonRoot") is not True:
                problems.append(f"{where} does not set runAsNonRoot: true")
            if setting("runAsUser") == 0:
                problems.append(f"{where} runs as uid 0")
            seccomp = (setting("seccompProfile") or {}).get("type")
            if seccomp not in ("RuntimeDefault", "Localhost"):
                problems.append(f"{where} has seccompProfile {seccomp!r}, not RuntimeDefault")
            if any("hostPort" in p for p in container.get("ports", [])):
                problems.append(f"{where} uses a hostPort")
    return problems


@dataclass(frozen=True)
class Peer:
    """A pod that sends traffic: its namespace, its namespace's labels, its own labels."""

    namespace: str
    labels: dict[str, str]

    @property
    def namespace_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace}


def ingress_allowed(docs: list[Doc], source: Peer, target: PodTemplate, port: int) -> bool:
    """Whether the rendered NetworkPolicies let `source` reach `target` on `port` (TCP): a pod
    no policy selects for ingress takes everything; otherwise some rule of a policy that selects
    it must allow the source and the port."""
    names = {p["containerPort"]: p.get("name") for p in container_ports(target.spec)}
    policies = [
        d
        for d in docs
        if d["kind"] == "NetworkPolicy"
        and namespace_of(d) == target.namespace
        and "Ingress" in d["spec"].get("policyTypes", ["Ingress"])
        and matches(d["spec"]["podSelector"], target.labels)
    ]
    if not policies:
        return True
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            peers = rule.get("from")
            ports = rule.get("ports")
            if ports and not any(p.get("port") in (port, names.get(port)) for p in ports):
                continue
            if not peers or any(peer_matches(peer, source, target.namespace) for peer in peers):
                return True
    return False


def peer_matches(peer: Doc, source: Peer, namespace: str) -> bool:
    if "ipBlock" in peer:
        return False
    if "namespaceSelector" in peer:
        if not matches(peer["namespaceSelector"], source.namespace_labels):
            return False
    elif source.namespace != namespace:
        return False
    return matches(peer.get("podSelector"), source.labels)
