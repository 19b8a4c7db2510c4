"""The TRL engine: SFT through TRL's SFTTrainer (`sft`), DPO through its DPOTrainer (`dpo`), GRPO
and GSPO through its GRPOTrainer (`grpo`). Each module implements the `Engine` protocol
(`SftEngine`, `DpoEngine`, `GrpoEngine`) over its ``run(job)``, one visible flow: set up the
model, the data and the adapter, report `training`, train (reporting every step through
`steps.StepReporting`), save.
"""
