"""The verl engine adapter: GRPO and GSPO with verl 0.9.1, colocated on the GPUs of one node.

The job entry point runs `akka_training.engines.verl.engine.VerlEngine`, one implementation of
the `Engine` protocol (`akka_training.engines.engine`; see the module for what it does). This package's own import stays empty on purpose: verl's processes import modules of
it (`reward_fn`, `hooks`, `preflight`) by name, and must not pull in the job's side (the
reporter, telemetry, blob store) with them.

Modules, in the order a job uses them: `overrides` (the plan as verl overrides, verl's rules),
`paths`, `data` (the dataset in verl's layout), `reward_config`, `preflight` (verl checks the
configuration), `launcher` (verl as a child process), `metrics` (verl's file logger),
`rollouts` and `records` (verl's dump joined with our reward records), `snapshots`, `engine`;
inside verl: `reward_fn`, `hooks`. `smoke` checks all of it on a GPU machine.
"""
