"""The verl engine adapter: GRPO and GSPO with verl 0.9.1, colocated on the GPUs of one node."""
