"""The job of an interactive run (`akka_training.core.interactive`): it holds a base model with
a PEFT LoRA adapter and answers the Tinker primitives the service routes to it.

- `wire`: the SDK's protobuf bodies, read and written with the schema the `tinker` package ships;
- `losses`: the built-in losses (``cross_entropy``, ``importance_sampling``, ``ppo``,
  ``cispo``, ``dro``);
- `model`: the model, its optimizer, and what each primitive does to them;
- `api`: the loopback HTTP API, which runs each model's requests in their order (``seq_id``)
  and keeps their results until the service retrieves them;
- `job`: ``python -m akka_training.engines.tinker.job job.json``, the entry point.
"""
