"""Observability beyond the training loop: profiler capture and summaries (``profiler``),
Weights & Biases runs (``wandb_run``) and the self-contained share report (``report``)."""
