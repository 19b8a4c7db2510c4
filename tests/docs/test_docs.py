"""The user guide: every page the release notes name exists, links resolve, and the failure
reasons page lists every reason the code can give."""

import re
from pathlib import Path

import pytest

from akka_training.core.failures import FailureReason

DOCS = Path(__file__).resolve().parents[2] / "docs"

PAGES = [
    "start-a-run.md",
    "execution-settings.md",
    "pipelines.md",
    "checkpoints-and-branches.md",
    "why-a-run-failed.md",
    "authenticate.md",
    "datasets.md",
    "rollouts.md",
    "regrade.md",
    "health-monitors.md",
    "observability.md",
    "grafana.md",
    "experiment-tracking.md",
    "reinforcement-learning.md",
    "supervised-fine-tuning.md",
    "preference-fine-tuning.md",
    "verl.md",
    "trl-on-gpus.md",
    "deploy-ray.md",
    "deploy-kubernetes.md",
    "settings.md",
    "python-client.md",
    "use-your-adapter.md",
    "evaluate-an-adapter.md",
    "cli.md",
    "contributing/ARCHITECTURE.md",
]


@pytest.mark.parametrize("page", PAGES)
def test_the_page_exists(page: str) -> None:
    assert (DOCS / page).is_file(), f"docs/{page} is missing"


def test_relative_links_resolve() -> None:
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).is_file(), f"{page.relative_to(DOCS)} links to {target}"


def test_every_failure_reason_is_explained() -> None:
    text = (DOCS / "why-a-run-failed.md").read_text()
    for reason in FailureReason:
        assert f"`{reason.value}`" in text, reason
        assert reason.sentence in text, reason
