"""deploy/: the images lint clean with hadolint; every kustomize overlay renders with
`kubectl kustomize` and every object validates (kubernetes-validate, strict, against the
Kubernetes version we target; the pod templates inside KubeRay's RayCluster as PodTemplates);
the settings files are settings the trainer reads; the Prometheus rules, their unit test and the
scrape config pass promtool, and the PrometheusRule holds the same rules; the collector has its
traces pipeline."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from akka_training.config.settings import load_settings
from tests.deploy.manifests import namespace_problems, pod_security_problems, reference_problems

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
OVERLAYS = sorted(p.name for p in (KUBERNETES / "overlays").iterdir() if p.is_dir())
# The Kubernetes version the manifests target (kubectl 1.32 renders them).
KUBERNETES_VERSION = "1.32.0"


def tool(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(found).exists():
        if name == "promtool":
            pytest.skip(
                "promtool is not installed: apt-get install prometheus (scripts/setup-promtool does it)"
            )
        pytest.fail(f"{name} is not installed (the dev extra, or kubectl on the machine)")
    return found


def run(*argv: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, input=input, timeout=120)
    assert result.returncode == 0, f"{' '.join(argv)}:\n{result.stdout}\n{result.stderr}"
    return result


def render(overlay: str) -> list[dict[str, Any]]:
    out = run(tool("kubectl"), "kustomize", str(KUBERNETES / "overlays" / overlay)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.mark.parametrize("dockerfile", ["trainer.Dockerfile", "worker.Dockerfile"])
def test_the_images_pass_hadolint(dockerfile: str) -> None:
    result = run(
        tool("hadolint"), "--failure-threshold", "info", str(DEPLOY / "docker" / dockerfile)
    )
    assert result.stdout == ""
    text = (DEPLOY / "docker" / dockerfile).read_text()
    assert "USER 1000:1000" in text and "HEALTHCHECK" in text


def test_the_service_image_has_no_torch_and_the_worker_takes_its_cuda_base_as_an_argument() -> None:
    trainer = (DEPLOY / "docker" / "trainer.Dockerfile").read_text()
    worker = (DEPLOY / "docker" / "worker.Dockerfile").read_text()
    assert "torch" not in trainer.replace("No torch", "") and '".[service,ray]"' in trainer
    assert "ARG CUDA_IMAGE=" in worker and "FROM ${CUDA_IMAGE}" in worker
    assert '".[service,train,ray]"' in worker


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_renders_and_every_object_validates(overlay: str, tmp_path: Path) -> None:
    docs = render(overlay)
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ServiceAccount", "ConfigMap", "Secret", "Deployment", "Service"} <= kinds
    checked = list(docs)
    for doc in docs:
        if doc["kind"] == "RayCluster":
            # Kubernetes has no schema for KubeRay's CRD: its pod templates are validated as
            # PodTemplates, the rest is checked below.
            groups = [doc["spec"]["headGroupSpec"], *doc["spec"]["workerGroupSpecs"]]
            for i, group in enumerate(groups):
                checked.append(
                    {
                        "apiVersion": "v1",
                        "kind": "PodTemplate",
                        "metadata": {"name": f"raycluster-group-{i}"},
                        "template": group["template"],
                    }
                )
    # The Prometheus Operator's and KubeRay's CRDs have no schema here either.
    crds = ("RayCluster", "PrometheusRule", "ServiceMonitor", "PodMonitor")
    checked = [d for d in checked if d["kind"] not in crds]
    path = tmp_path / f"{overlay}.yaml"
    path.write_text(yaml.safe_dump_all(checked))
    result = run(
        tool("kubernetes-validate"), "--strict", "-k", KUBERNETES_VERSION, "--quiet", str(path)
    )
    assert "ERROR" not in result.stdout + result.stderr
    # The settings in the rendered ConfigMap are settings the trainer reads.
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and "settings.yaml" in d["data"]]
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(config["data"]["settings.yaml"])
    settings = load_settings(settings_file)
    assert settings.trainer.bootstrap.admin_token_file == "/etc/akka/secrets/admin/admin-token"
    assert settings.trainer.bootstrap.write_cli_context is False
    (deployment,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "akka-trainer"
    ]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    # No more RBAC than it needs: none.
    assert not kinds & {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def test_the_embedded_overlay_is_one_replica_on_a_volume() -> None:
    docs = render("embedded")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["home"] == {
        "name": "home",
        "persistentVolumeClaim": {"claimName": "akka-trainer-home"},
    }
    assert "PersistentVolumeClaim" in {d["kind"] for d in docs}


def test_the_production_overlay_runs_two_replicas_on_postgres_s3_and_a_ray_cluster(
    tmp_path: Path,
) -> None:
    docs = render("production")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    (deployment,) = [d for d in by_kind["Deployment"] if d["metadata"]["name"] == "akka-trainer"]
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    # The Secrets by the hashed names kustomize gives them.
    secret_names = {s["metadata"]["name"] for s in by_kind["Secret"]}
    database = env["AKKA_TRAINER__DATABASE__URL"]["valueFrom"]["secretKeyRef"]
    assert database["name"] in secret_names and database["name"].startswith(
        "akka-trainer-database-"
    )
    s3 = env["AKKA_TRAINER__STORAGE__S3__SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]
    assert s3["name"] in secret_names and s3["name"].startswith("akka-trainer-s3-")
    assert s3["key"] == "secret-access-key"
    assert {"POD_NAME", "NODE_NAME"} <= set(env)
    (config,) = [c for c in by_kind["ConfigMap"] if "settings.yaml" in c["data"]]
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(config["data"]["settings.yaml"])
    settings = load_settings(settings_file)
    assert settings.storage_url.startswith("s3://") and settings.trainer.backend == "ray"
    pool_labels = {p.label for p in settings.trainer.pools or []}
    (cluster,) = by_kind["RayCluster"]
    workers = cluster["spec"]["workerGroupSpecs"]
    gpu_groups = [
        g for g in workers
        if "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]
    ]  # fmt: skip
    assert gpu_groups
    for group in gpu_groups:
        assert group["labels"]["pool"] in pool_labels
        (worker,) = group["template"]["spec"]["containers"]
        names = {e["name"]: e for e in worker["env"]}
        assert names["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        assert names["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert {
        "akka-trainer-database",
        "akka-trainer-s3",
        "akka-trainer-admin",
        "akka-trainer-grafana",
    } <= {s["metadata"]["name"].rsplit("-", 1)[0] for s in by_kind["Secret"]}
    # The PrometheusRule holds the rules of deploy/prometheus, and promtool accepts its spec.
    (rule,) = by_kind["PrometheusRule"]
    rules_file = yaml.safe_load(
        (DEPLOY / "prometheus" / "akka-training-alerts.rules.yml").read_text()
    )
    assert rule["spec"] == rules_file
    spec_file = tmp_path / "prometheusrule-spec.yml"
    spec_file.write_text(yaml.safe_dump(rule["spec"]))
    run(tool("promtool"), "check", "rules", str(spec_file))


def test_the_prometheus_rules_and_scrape_config_pass_promtool() -> None:
    promtool = tool("promtool")
    out = run(
        promtool, "check", "rules", str(DEPLOY / "prometheus" / "akka-training-alerts.rules.yml")
    )
    assert "SUCCESS: 2 rules found" in out.stdout
    run(promtool, "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml"))
    # The alert fires for a run whose steps stop while it is TRAINING, and only for it.
    tested = run(
        promtool,
        "test",
        "rules",
        str(DEPLOY / "prometheus" / "tests" / "akka-training-alerts.test.yml"),
    )
    assert "SUCCESS" in tested.stdout


def test_the_collector_has_a_metrics_and_a_traces_pipeline() -> None:
    config = yaml.safe_load((DEPLOY / "otel" / "collector.yaml").read_text())
    pipelines = config["service"]["pipelines"]
    assert pipelines["metrics"]["receivers"] == ["otlp"] and pipelines["traces"]["receivers"] == [
        "otlp"
    ]
    assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"] == "0.0.0.0:4318"
    assert config["exporters"]["prometheus"]["resource_to_telemetry_conversion"] == {
        "enabled": True
    }
    for name in pipelines["traces"]["exporters"] + pipelines["metrics"]["exporters"]:
        assert name in config["exporters"]


def test_the_deploy_page_overlay_renders_with_the_secrets_replaced(tmp_path: Path) -> None:
    """docs/deploy-kubernetes.md's own overlay, beside a copy of deploy/, with the secrets its
    commands make: it renders, and every placeholder is gone."""
    page = (REPO / "docs" / "deploy-kubernetes.md").read_text()
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    make_secrets = re.findall(r"```bash\n(mkdir -p my-akka/secrets.*?)```", page, re.S)[0]
    run("bash", "-euc", f"cd {tmp_path}\n{make_secrets}")
    (overlay,) = [b for b in re.findall(r"```yaml\n(.*?)```", page, re.S) if "secretGenerator" in b]
    (tmp_path / "my-akka" / "kustomization.yaml").write_text(overlay)
    docs = [
        d
        for d in yaml.safe_load_all(
            run(tool("kubectl"), "kustomize", str(tmp_path / "my-akka")).stdout
        )
        if d
    ]
    secrets = {d["metadata"]["name"].rsplit("-", 1)[0]: d for d in docs if d["kind"] == "Secret"}
    assert set(secrets) == {
        "akka-trainer-admin",
        "akka-trainer-grafana",
        "akka-trainer-database",
        "akka-trainer-s3",
    }
    for secret in secrets.values():
        for value in secret["data"].values():
            assert b"CHANGE-ME" not in base64.b64decode(value), secret["metadata"]["name"]
    admin = base64.b64decode(secrets["akka-trainer-admin"]["data"]["admin-token"]).strip()
    assert len(admin) == 64
    # Every object lands in the namespace, and the pods name the replaced Secrets by their new
    # hashed names.
    assert namespace_problems(docs, "akka") == []
    assert reference_problems(docs) == []
    assert pod_security_problems(docs) == []
    (deployment,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "akka-trainer"
    ]
    mounted = {
        v["secret"]["secretName"]
        for v in deployment["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }
    assert secrets["akka-trainer-admin"]["metadata"]["name"] in mounted
