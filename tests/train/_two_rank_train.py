"""The trainer under several ranks: its config, a generation double, and the two-rank run.

As a script, under `torchrun --nproc_per_node=2 tests/train/_two_rank_train.py OUT RUN...`:
for each RUN every rank calls the trainer and saves its whole parameters after the last step as
`OUT/<RUN>_rank<r>.pt`. RUN `z2` / `z3`: `loop.train` on `config(OUT, "two_ranks_z<stage>",
stage)` (HARGO, 4 prompts x G 2, two steps); `sft`: `loop.train` of the sft preset after an SFT
warm start (`sft_config`, ZeRO-2); `sft-cli`: `loop.sft_run` (what `hargo sft` calls) under
ZeRO-3; `z2-resume`: the z2 run stopped by SIGUSR1 on rank 0 after step 1 (the ranks agree to
stop, each writes its part of the checkpoint), then continued with `resume=True`;
`z2-gen-stop`: the same with the signal during step 2's generation (the ranks agree at the
boundary after it; the checkpoint holds step 2 in flight); `z3-sharded-ref`: the z3 run with
the reference model partitioned over the ranks (`model.reference_device = "sharded"`);
`z3-real`: the z3 run with the real generation backend (HF `generate` on the ZeRO-3 engine's
gathered weights, each row its own seeded stream).

Generation goes through `GenerationDouble` except in `z3-real`: its completions depend only on
the prompt and the completion's index in its group, never on the rank or on how the prompts
were shared out, so a one-process run of the same config sees exactly the same batch over
every step and the test can compare the updates. The real backend's rows are seeded the same
way: at step 1 (the same weights everywhere) its completions equal a one-process run's.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch

from hargo_hpc.config import ExperimentConfig, validate_config

WORDS = ("the", "loop", "parallel", "thread", "memory", "cache", "openmp", "reduction",
         "vector", "kernel", "shared", "private", "schedule", "barrier", "atomic", "array")
MAX_NEW = 10


def config(out: Path, name: str, stage: int, algorithm: str = "hargo",
           sft_steps: int = 0, reference_device: str = "policy") -> ExperimentConfig:
    """HARGO (or `algorithm`) with DAPO's token-mean aggregation (the whole step's token count
    as the denominator: the ranks' counts differ) on plp_qa (continuous rewards, so groups have
    contrast), 4 prompts x G 2 = 8 rows, micro-batches of 2, one optimizer step per RL step,
    two steps."""
    return validate_config({
        "run": {"name": name, "dir": str(out), "seed": 0},
        "model": {"path": "tiny", "reference_device": reference_device},
        "algorithm": {"name": algorithm, "agg": "token-mean"},
        "data": {"tasks": [{"name": "plp_qa", "max_items": 12}], "eval_fraction": 0.0},
        "rollout": {"num_generations": 2, "prompts_per_step": 4, "max_new_tokens": MAX_NEW},
        "training": {"lr": 1e-3, "steps": 2, "micro_batch_size": 2, "zero_stage": stage,
                     "save_every": 0},
        "sft": {"steps": sft_steps, "lr": 1e-3, "check_examples": 0},
    })


def sft_config(out: Path, name: str) -> ExperimentConfig:
    """The sft preset (2 RL steps on the step's reference answers) after a 2-step SFT warm start,
    ZeRO-2: every SFT path of `loop.train` under several ranks."""
    return config(out, name, 2, "sft", sft_steps=2)


def sft_cli_config(out: Path, name: str) -> ExperimentConfig:
    """`hargo sft` (loop.sft_run): 2 SFT steps under ZeRO-3."""
    return config(out, name, 3, sft_steps=2)


def completion(prompt: str, j: int) -> str:
    """A fixed completion of `prompt` (the j-th of its group): words picked by a hash."""
    digest = hashlib.sha256(f"{j}:{prompt}".encode()).digest()
    return " ".join(WORDS[b % len(WORDS)] for b in digest[: 3 + digest[-1] % 6])


class GenerationDouble:
    """Stands in for HFGenerateBackend (same constructor): left-padded prompts, the fixed
    `completion`s tokenized, right-padded and cut at max_new_tokens."""

    def __init__(self, model: Any, tokenizer: Any, **_: Any) -> None:
        self.model, self.tokenizer = model, tokenizer

    def generate(self, prompts: list[str], G: int, params: Any, seeds: Any = None) -> Any:
        from hargo_hpc.train.rollout.generate import Generations

        tok, pad = self.tokenizer, self.tokenizer.pad_token_id
        device = next(self.model.parameters()).device
        prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        width = max(len(ids) for ids in prompt_ids)
        rows_p, rows_c, texts, cut = [], [], [], []
        each = params if isinstance(params, list) else [params] * len(prompts)  # per prompt
        for p, ids, limit in zip(prompts, prompt_ids, each, strict=True):
            for j in range(G):
                c = tok(completion(p, j), add_special_tokens=False)["input_ids"]
                cut.append(len(c) > limit.max_new_tokens)
                c = c[: limit.max_new_tokens]
                rows_p.append([pad] * (width - len(ids)) + ids)
                rows_c.append(c)
                texts.append(tok.decode(c, skip_special_tokens=True))
        t = max(len(c) for c in rows_c)
        c_ids = torch.tensor([c + [pad] * (t - len(c)) for c in rows_c], device=device)
        c_mask = torch.tensor([[1] * len(c) + [0] * (t - len(c)) for c in rows_c], device=device)
        p_ids = torch.tensor(rows_p, device=device)
        p_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids)
                               for ids in prompt_ids for _ in range(G)], device=device)
        groups = torch.arange(len(prompts), device=device).repeat_interleave(G)
        return Generations(p_ids, p_mask, c_ids, c_mask, torch.tensor(cut, device=device),
                           texts, groups)


def main(out: Path, runs: list[str]) -> None:
    from hargo_hpc.train import loop, sft_run
    from hargo_hpc.train.backend import distributed

    torch.set_num_threads(1)
    env = distributed.init()
    real_backend = loop.HFGenerateBackend
    loop.HFGenerateBackend = GenerationDouble  # type: ignore[misc, assignment]
    export_model = loop.export_model
    label = [""]

    def saving_export(engine: Any, tokenizer: Any, path: Path, *, lora: bool) -> Path:
        state = engine.full_state_dict()  # every rank, whole
        torch.save(state, out / f"{label[0]}_rank{env.rank}.pt")
        return export_model(engine, tokenizer, path, lora=lora)

    load_models = loop.load_models

    def loaded_and_measured(*args: Any, **kwargs: Any) -> Any:
        """What each model holds in this rank's memory right after loading: nothing under
        ZeRO-3 (created partitioned), the whole model otherwise."""
        policy, tokenizer, reference = load_models(*args, **kwargs)
        sizes = {name: {"whole": sum(getattr(p, "ds_numel", p.numel()) for p in params),
                        "materialised": sum(p.numel() for p in params)}
                 for name, model in (("policy", policy), ("reference", reference))
                 if model is not None for params in [list(model.parameters())]}
        (out / f"{label[0]}_loaded_rank{env.rank}.json").write_text(json.dumps(sizes))
        return policy, tokenizer, reference

    loop.load_models = loaded_and_measured  # type: ignore[assignment]
    loop.export_model = saving_export  # type: ignore[assignment]  # `train`'s
    sft_run.export_model = saving_export  # type: ignore[assignment]  # `hargo sft`'s
    for run in runs:
        label[0] = run
        if run == "sft":
            loop.train(sft_config(out, "two_ranks_sft"), log=lambda _: None, progress=False)
        elif run == "sft-cli":
            loop.sft_run(sft_cli_config(out, "two_ranks_sft_cli"), log=lambda _: None)
        elif run == "z2-gen-stop":  # SIGUSR1 on rank 0 during step 2's generation
            generate = loop.start_step

            def signal_during_step_two(ctx: Any, state: Any, step: int,
                                       generate: Any = generate) -> Any:
                rollout = generate(ctx, state, step)
                if step == 2 and env.rank == 0:
                    os.kill(os.getpid(), signal.SIGUSR1)
                return rollout

            loop.start_step = signal_during_step_two  # type: ignore[assignment]
            cut = config(out, "two_ranks_gen_stop", 2)
            first = loop.train(cut, log=lambda _: None, progress=False)
            assert first.interrupted and first.step == 1, first  # step 2 in flight
            loop.start_step = generate  # type: ignore[assignment]
            loop.train(cut, resume=True, log=lambda _: None, progress=False)
        elif run == "z2-resume":  # SIGUSR1 on rank 0 after step 1, then --resume
            resumed = config(out, "two_ranks_resume", 2)
            first = loop.train(resumed, log=lambda _: None, progress=False,
                               on_step=lambda record: record["step"] == 1 and os.kill(
                                   os.getpid(), signal.SIGUSR1))
            assert first.interrupted and first.step == 1, first
            loop.train(resumed, resume=True, log=lambda _: None, progress=False)
        elif run == "z3-real":  # the real generation backend under ZeRO-3
            loop.HFGenerateBackend = real_backend  # type: ignore[misc]
            loop.train(config(out, "two_ranks_z3_real", 3), log=lambda _: None, progress=False)
            loop.HFGenerateBackend = GenerationDouble  # type: ignore[misc, assignment]
        elif run == "z3-sharded-ref":  # the reference partitioned over the ranks by ZeRO-3
            place = loop.place_reference

            def placed_and_measured(*args: Any, place: Any = place) -> Any:
                reference = place(*args)  # what this rank holds of it, and of the whole
                params = list(reference.parameters())
                sizes = {"whole": sum(p.ds_numel for p in params), "count": len(params),
                         "held": sum(p.ds_tensor.numel() for p in params),
                         "materialised": sum(p.numel() for p in params)}
                sizes_file = out / f"z3-sharded-ref_reference_rank{env.rank}.json"
                sizes_file.write_text(json.dumps(sizes))
                return reference

            loop.place_reference = placed_and_measured  # type: ignore[assignment]
            loop.train(config(out, "two_ranks_z3_sharded_ref", 3, reference_device="sharded"),
                       log=lambda _: None, progress=False)
            loop.place_reference = place  # type: ignore[assignment]
        else:
            stage = int(run.removeprefix("z"))
            loop.train(config(out, f"two_ranks_z{stage}", stage), log=lambda _: None,
                       progress=False)
    distributed.teardown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
    from hargo_hpc.train.backend.distributed import end_process

    end_process(0)  # as hargo's ranks end (a group's threads may outlive the run)
