"""Two gloo ranks, ZeRO-3, each with its own vLLM engine (`test_vllm_backend.py` runs it under
torchrun): after an optimizer step each rank's engine is given the trainer's weights (gathered
a module at a time) and generates its own prompts greedily as HF `generate` does on the
gathered weights. Writes `rank<r>.json`: the rows equal, the rows, the log-prob bound, and
whether any rank ever held the policy whole outside a gather."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from _vllm_cases import BUDGETS, PROMPTS, G, compare_with_hf, fresh_policy, one_step


def main(out: Path) -> None:
    from transformers import AutoTokenizer

    from hargo_hpc.train.backend import distributed
    from hargo_hpc.train.backend.engine import build_engine
    from hargo_hpc.train.model.models import prepare_tokenizer, smollm2_dir
    from hargo_hpc.train.rollout.vllm_backend import Colocated, VLLMBackend

    env = distributed.init()
    directory = smollm2_dir()  # built once by the test before the ranks start
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(directory))
    engine = build_engine(fresh_policy(directory), zero_stage=3, lr=1e-3, micro_batch_size=1,
                          overrides={"zero_optimization": {
                              "stage3_param_persistence_threshold": 0}})
    partitioned = all(p.numel() == 0 for p in engine.module.parameters())
    backend = VLLMBackend(str(directory), tokenizer, dtype="float32", seed=env.rank,
                          max_model_len=512, kv_cache_gib=0.25)
    colocated = Colocated(backend, engine)
    one_step(engine, tokenizer)
    mine = slice(env.rank, None, env.world_size)
    prompts, budgets = PROMPTS[mine], BUDGETS[mine]
    colocated.generate(prompts[:1], 1, budgets[0])  # the push, every rank together
    equal, bound = compare_with_hf(backend, engine.module, tokenizer, prompts, budgets,
                                   gather=engine.gathered_parameters)
    (out / f"rank{env.rank}.json").write_text(json.dumps({
        "equal": equal, "rows": len(prompts) * G, "bound": bound, "pushes": colocated.pushes,
        "partitioned": partitioned}))
    distributed.teardown()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    from hargo_hpc.train.backend.distributed import end_process

    end_process(0)  # as hargo's ranks end (a group's threads may outlive the run)
