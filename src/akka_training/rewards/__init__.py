"""The reward layer shared by every reinforcement engine.

An engine hands each generation batch to a `scorer.RewardScorer` built from the plan's
``config.reward``; every rollout comes back with its score, each term's weighted share, timings
and failures, so rollouts score the same under TRL and verl. The modules:

- `inputs`: what a term scores (`RolloutInput`) and what it returns (`TermOutcome`,
  `TermFailed` with a `FailureCause`).
- `terms`: one grader per term kind (``match``, ``regex``, ``length``, ``rule``, ``judge``,
  ``http``) and the registry that builds them from the plan.
- `scorer`, `scoring`: the concurrent scorer and the plain dataclasses it returns.
- `bundles`: packing, hashing, unpacking and importing scoring bundles.
- `rollouts`: the `Rollout` record and its one-Parquet-file-per-step storage.
- `figures`: the per-step RL figures and histogram values computed from rollouts.

Importing this package pulls no training library: the service reads step files through
`rollouts` and packs bundles through `bundles`.
"""
