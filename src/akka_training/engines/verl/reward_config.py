"""What the reward function needs inside verl's workers, as one JSON file.

verl runs our reward function (`reward_fn.compute_score`) in its own Ray worker processes,
which never talk to the service. The job writes this file before it starts verl and passes its
path to the function as a keyword argument (``reward_kwargs``, with ``AKKA_VERL_REWARD_CONFIG``
in the environment as a fallback).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from akka_training.core.resolved import JobSpec

CONFIG_KWARG = "akka_reward_config"
CONFIG_ENV = "AKKA_VERL_REWARD_CONFIG"
SETUP_ERROR_FILE = "setup-error.txt"


@dataclass(frozen=True)
class RewardConfig:
    """The reward terms of the plan and what scoring them needs in a worker process."""

    # Each term as the plan's JSON (`config.reward.terms[i]`).
    terms: list[dict[str, Any]]
    max_concurrency: int
    # Where each rule term's bundle (``PROJECT/NAME:vN``) was unpacked on this host.
    bundles: dict[str, str]
    # The base model's directory, whose tokenizer counts completion tokens.
    tokenizer: str
    # verl's data.max_response_length: a completion this long was cut off.
    max_response_length: int
    # Directory of the per-process record files.
    records: str
    extra: dict[str, Any] = field(default_factory=dict)

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(self.to_json(), indent=2), encoding="utf-8")
        partial.replace(path)
        return path

    def to_json(self) -> dict[str, Any]:
        return {
            "terms": self.terms,
            "maxConcurrency": self.max_concurrency,
            "bundles": self.bundles,
            "tokenizer": self.tokenizer,
            "maxResponseLength": self.max_response_length,
            "records": self.records,
            "extra": self.extra,
        }

    @classmethod
    def read(cls, path: Path | str) -> RewardConfig:
        body = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(
            terms=list(body["terms"]),
            max_concurrency=int(body["maxConcurrency"]),
            bundles=dict(body.get("bundles", {})),
            tokenizer=str(body["tokenizer"]),
            max_response_length=int(body["maxResponseLength"]),
            records=str(body["records"]),
            extra=dict(body.get("extra", {})),
        )


def reward_config_for(
    spec: JobSpec,
    *,
    records: Path,
    max_response_length: int,
    bundles: Mapping[str, Path] | None = None,
) -> RewardConfig:
    """The reward configuration of a resolved plan. `bundles` maps each rule term's bundle
    reference to the directory the job unpacked it into."""
    reward = spec.settings.config.reward
    if reward is None or not reward.terms:
        raise ValueError("a grpo or gspo run needs config.reward.terms")
    return RewardConfig(
        terms=[term.to_json() for term in reward.terms],
        max_concurrency=reward.max_concurrency,
        bundles={ref: str(path) for ref, path in (bundles or {}).items()},
        tokenizer=spec.settings.base_model.path,
        max_response_length=max_response_length,
        records=str(records),
    )


def bundle_refs(spec: JobSpec) -> list[str]:
    """The bundles the plan's rule terms come from, each once, in plan order."""
    reward = spec.settings.config.reward
    refs: list[str] = []
    for term in reward.terms if reward else []:
        bundle = getattr(term, "bundle", None)
        if term.kind == "rule" and bundle and bundle not in refs:
            refs.append(bundle)
    return refs
