"""akka training: a self-hosted trainer for LoRA adapters (SFT, DPO, GRPO, GSPO on TRL or verl)."""

__version__ = "0.5.0"
