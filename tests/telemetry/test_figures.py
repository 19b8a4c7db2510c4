from __future__ import annotations

import re

from akka_training.telemetry import catalog as c
from akka_training.telemetry import figures
from akka_training.telemetry.figures import Route, histogram_route, mapping_rows, route

P = c.PREFIX


def test_step_figures_route_to_catalog_metrics() -> None:
    assert route("sft", "loss") == Route(P + "sft.loss")
    assert route("sft", "timing/save") == Route(P + "sft.step.timing", {c.STEP_PHASE: "save"})
    assert route("rl", "timing/generation") == Route(
        P + "rl.step.timing", {c.STEP_PHASE: "generation"}
    )
    assert route("rl", "terms/format/share_std") == Route(
        P + "rl.term.share.std", {c.REWARD_TERM: "format"}
    )
    assert route("rl", "memory/generation") == Route(
        P + "memory.peak", {c.MEMORY_PART: "generation"}
    )
    assert route("rl", "clip_ratio/high_mean") == Route(
        P + "rl.policy.clipped.ratio", {c.CLIP_BOUND: "high"}
    )
    assert route("sft", "tokens_per_second") == Route(P + "step.throughput")


def test_figures_outside_the_table_are_not_routed() -> None:
    assert route("sft", "reward/mean") is None  # a reinforcement figure in a supervised step
    assert route("rl", "terms//share_mean") is None
    assert route("rl", "frac_reward_zero_std") is None  # TRL's name; the scorer reports groups/
    assert route("rl", "groups/frac_zero_std") == Route(P + "rl.reward.zero_std.ratio")
    assert route("sft", "padding_share") == Route(P + "data.padding.ratio")
    assert route("sft", "memory/peak") == Route(P + "memory.allocated.peak")
    assert histogram_route("terms/x/share") is None
    assert histogram_route("reward/") is None
    assert histogram_route("reward") == Route(P + "rl.rollout.reward")
    assert histogram_route("reward/correct") == Route(
        P + "rl.rollout.term.share", {c.REWARD_TERM: "correct"}
    )


def test_every_route_names_a_job_metric_and_allowed_attribute_values() -> None:
    routes = [*figures._FIXED["sft"].values(), *figures._FIXED["rl"].values()]
    routes += list(figures._HISTOGRAMS.values())
    for r in routes:
        spec = c.metric(r.metric)
        assert spec.publisher is c.Publisher.JOB
        assert set(r.attributes) <= set(spec.attributes), r
        for name, value in r.attributes.items():
            allowed = c.attribute(name).values
            assert not allowed or value in allowed, (name, value)
    for _prefix, _suffix, metric, attribute in figures._PATTERNS["rl"]:
        assert attribute in c.metric(metric).attributes


def test_the_module_table_matches_the_routes() -> None:
    documented: set[tuple[str, str, str]] = set()
    section = ""
    for line in (figures.__doc__ or "").splitlines():
        header = re.match(r"\| (figure \((\w+)[^)]*\)|name)\s", line)
        if header:
            section = header.group(2) or "histogram"
            continue
        row = re.match(r"\| ([^| ]+)\s*\| ([a-z0-9_.]+)\s*\|\s*([^|]*?)\s*\|$", line)
        if row and not line.startswith("|--"):
            attrs = row.group(3).replace(" ", "")
            documented.add((section, row.group(1), f"{row.group(2)}|{attrs}"))
    generated = set()
    for kind, figure, metric, attrs in mapping_rows():
        short_attrs = ",".join(a.removeprefix(P) for a in attrs.split(", ")) if attrs else ""
        generated.add((kind, figure, f"{metric.removeprefix(P)}|{short_attrs}"))
    assert documented == generated
