"""Peak host memory of one update pass (forward, log-probs and entropy, backward) on the CPU:
the package's `token_logprobs_and_entropy` (log-probs a row at a time with no float32 copy of
the logits kept for backward, the logged entropy without a graph) against the pass as it was
before issue Y (the logits' float32 copy, the log-softmax and the entropy's softmax all under
autograd), on the same model and batch.

Each measurement is a fresh process (its peak resident set, `ru_maxrss`, less its resident set
just before the pass), the two sides interleaved and repeated; the script prints each side's
median and range and the ratio of the medians (after / before).

`--part prefill` measures generation's shared prefill of the prompts instead: every prompt
position's logits (before) against the last one's (`logits_to_keep=1`, after).

Run: .venv/bin/python benchmarks/update_memory.py [--model smollm2] [--dtype bfloat16]
     [--rows 4] [--prompt 64] [--completion 256] [--repeats 3] [--part prefill]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from _sides import interleaved, report


def measure(model_name: str, dtype: str, rows: int, prompt: int, completion: int,
            side: str, part: str = "update") -> float:
    """(In the child.) MiB the pass added to the process's peak resident set."""
    import torch

    from hargo_hpc.train.model import logprobs
    from hargo_hpc.train.model.models import load_policy

    torch.manual_seed(0)
    model, _ = load_policy(model_name, dtype=dtype)
    vocab = model.config.vocab_size
    if part == "prefill":
        return prefill(model, torch.randint(0, vocab, (rows, prompt)), side)
    model.train()
    ids = torch.randint(0, vocab, (rows, prompt + completion))
    mask = torch.ones_like(ids)
    if side == "before":
        logprobs._chunk = _as_before_issue_y(logprobs)  # the earlier pass, for comparison
    base = _rss_mib()
    lp, ent = logprobs.token_logprobs_and_entropy(model, ids, mask, prompt, rows, grad=True)
    loss = -lp.mean() + 0.0 * float(ent.mean())  # the entropy is logged, never differentiated
    loss.backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return peak - base


def prefill(model: Any, ids: Any, side: str) -> float:
    """The generation backend's shared prefill (`HFGenerateBackend._shared_prefill`'s call):
    the prompts' KV cache with one position's logits (after) or every position's (before, the
    model's default). The peak is read from VmHWM, reset just before the pass."""
    import torch

    from hargo_hpc.train.model.logprobs import position_ids_from_mask

    model.eval()
    mask = torch.ones_like(ids)
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the peak resident set starts again from here
    base = _rss_mib()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask),
              use_cache=True, logits_to_keep=1 if side == "after" else 0)
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return peak / 1024.0 - base


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _as_before_issue_y(logprobs: Any) -> Callable[..., Any]:
    """`logprobs._chunk` as it was before issue Y: the entropy under autograd, so backward
    keeps the [rows, T, V] softmax."""
    import torch

    def chunk(model: Any, input_ids: Any, attention_mask: Any, completion_start: int, *,
              temperature: float, entropy: bool) -> tuple[Any, Any]:
        length = input_ids.shape[1] - completion_start
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    position_ids=logprobs.position_ids_from_mask(attention_mask),
                    use_cache=False, logits_to_keep=length + 1)
        logits = out.logits[:, -(length + 1):-1, :].float() / temperature
        log_norm = torch.logsumexp(logits, dim=-1)
        targets = input_ids[:, completion_start:].long().unsqueeze(-1)
        lp = logits.gather(-1, targets).squeeze(-1) - log_norm
        if not entropy:
            return lp, None
        return lp, log_norm - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)

    return chunk


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="tiny, smollm2 or a directory")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--completion", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache"),
                        help="XDG cache directory for the models (default: yours)")
    parser.add_argument("--part", choices=("update", "prefill"), default="update",
                        help="the update pass, or generation's shared prefill of the prompts")
    parser.add_argument("--child", choices=("before", "after"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.model, args.dtype, args.rows, args.prompt,
                                 args.completion, args.child, args.part)))
        return 0

    def child(side: str) -> float:
        done = subprocess.run(
            [sys.executable, __file__, "--child", side, "--model", args.model,
             "--dtype", args.dtype, "--part", args.part, "--rows", str(args.rows),
             "--prompt", str(args.prompt), "--completion", str(args.completion)],
            capture_output=True, text=True, check=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                 "XDG_CACHE_HOME": args.cache})
        return json.loads(done.stdout.strip().splitlines()[-1])

    found = interleaved(("before", "after"), args.repeats, child)
    shape = (f"{args.rows} rows x ({args.prompt} prompt + {args.completion} completion) tokens"
             if args.part == "update" else f"{args.rows} prompts x {args.prompt} tokens")
    what = "one update pass" if args.part == "update" else "the shared prefill"
    print(f"{what}, {args.model}, {shape}, {args.dtype}, {args.repeats} runs a side:")
    report(found, label="peak ")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
