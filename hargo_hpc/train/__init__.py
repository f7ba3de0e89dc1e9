"""The RL trainer, in the order of the data flow (docs/training.md):

- `model/`: models and tokenizers (any HF checkpoint, the tiny model, LoRA, export), token
  log-probs;
- `rollout/`: generation, the step's rollout, rewards (in process and through the handoff),
  local bench workers;
- `backend/`: the DeepSpeed engine (the only module importing deepspeed), checkpoints, ranks;
- the loop and its phases, here: `loop.py` (the run), `run.py` (its immutable context and loop
  state), `setup.py` (checks and set-up), `step.py` (one step, one block per verl phase),
  `phases.py` (what each phase computes), `step_record.py` (the metrics record),
  `updates.py` (the update), `sqd_run.py` (SQD in the loop), `metrics.py`;
- SFT: `sft.py` (batches and loss), `sft_run.py` (the warm start and `hargo sft`);
- `early_stop.py` (a stop signal before the loop's handlers).

Its sections of the job file are `config/training.py`; its commands `cli/train.py`.
"""
