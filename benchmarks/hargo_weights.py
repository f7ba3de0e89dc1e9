"""HARGO's per-response weights next to GRPO's on a mixed batch, with no model.

The batch mixes a binary task (data-race yes/no, reward 0/1, 2-token answers) and a continuous
task (PLP-style QA, embedding similarity in [0, 1], 40-token answers), 4 responses per prompt.
The reference log-probs are SYNTHETIC (drawn from a fixed-seed generator), standing in for
what the reference model would give. Run: `python benchmarks/hargo_weights.py` (a second or two).
"""

from __future__ import annotations

import torch

from hargo_hpc.algorithms import compute_advantages, hargo_signals, hargo_weights

G = 4  # responses per prompt
T = 40  # padded completion length


def synthetic_batch(seed: int = 0) -> tuple[list[str], torch.Tensor, torch.Tensor,
                                             torch.Tensor, torch.Tensor]:
    """(task per response, rewards [B], group_index [B], ref_logprobs [B, T], mask [B, T])."""
    gen = torch.Generator().manual_seed(seed)
    tasks: list[str] = []
    rewards: list[float] = []
    groups: list[int] = []
    lengths: list[int] = []
    per_token: list[float] = []  # the mean per-token reference log-prob of each response
    # binary task: reward 1 for the right yes/no; the reference is sure of its favourite answer
    binary = [  # (rewards, per-token log-prob of each answer)
        ([1, 1, 0, 1], [-0.05, -0.05, -1.20, -0.05]),  # usually right, wrong answer unlikely
        ([0, 0, 1, 0], [-0.08, -0.08, -1.50, -0.08]),  # confidently wrong; right one rare
        ([1, 1, 1, 1], [-0.04, -0.04, -0.04, -0.04]),  # solved: zero contrast
    ]
    for g, (rs, lps) in enumerate(binary):
        for r, lp in zip(rs, lps, strict=True):
            tasks.append("yes/no")
            rewards.append(float(r))
            groups.append(g)
            lengths.append(2)
            per_token.append(lp)
    # continuous task: similarity rewards close together, long answers
    continuous = [
        ([0.82, 0.79, 0.85, 0.80], [-1.10, -1.30, -1.45, -1.05]),
        ([0.55, 0.71, 0.62, 0.68], [-1.60, -1.20, -1.40, -1.25]),
    ]
    for g, (rs, lps) in enumerate(continuous, start=len(binary)):
        for r, lp in zip(rs, lps, strict=True):
            tasks.append("similarity")
            rewards.append(r)
            groups.append(g)
            lengths.append(T)
            per_token.append(lp)
    batch = len(rewards)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    noise = 0.3 * torch.randn(batch, T, generator=gen)
    noise = noise - (noise * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)
    ref = torch.tensor(per_token)[:, None] + torch.where(mask, noise, torch.zeros_like(noise))
    ref = torch.where(mask, ref.clamp(max=0.0), torch.full_like(ref, -99.0))  # padding: junk
    return tasks, torch.tensor(rewards), torch.tensor(groups), ref, mask


def main() -> None:
    tasks, rewards, groups, ref, mask = synthetic_batch()
    grpo = compute_advantages("grpo", rewards, groups)
    sig = hargo_signals(rewards, groups, ref, mask)
    _, stats = hargo_weights(rewards, groups, ref, mask)
    ablation = {
        "D only": hargo_weights(rewards, groups, ref, mask, confidence=False)[0],
        "C only": hargo_weights(rewards, groups, ref, mask, discrimination=False)[0],
        "off": hargo_weights(rewards, groups, ref, mask, discrimination=False,
                             confidence=False)[0],
    }
    print("HARGO weights vs GRPO on a mixed batch (reference log-probs are SYNTHETIC)")
    print(f"contrast_ref = {sig.contrast_ref:.4f} (σ̄ of the std_batch statistic; 1 for the "
          "scale-free default, which needs none)")
    head = (f"{'grp':>3} {'task':<10} {'tok':>3} {'reward':>6} {'conf':>6} {'GRPO A':>7} "
            f"{'D_g':>5} {'C_i':>5} {'mod Ã':>7} | {'w GRPO':>6} {'w HARGO':>7} "
            f"{'w·A':>7} | {'D only':>6} {'C only':>6} {'off':>4}")
    print(head)
    print("-" * len(head))
    for i in range(rewards.numel()):
        print(
            f"{int(groups[i]):>3} {tasks[i]:<10} {int(mask[i].sum()):>3} "
            f"{float(rewards[i]):>6.2f} {float(sig.confidence[i]):>6.2f} "
            f"{float(grpo[i]):>7.3f} {float(sig.discrimination[i]):>5.2f} "
            f"{float(sig.confidence_factor[i]):>5.2f} {float(sig.modulated_advantages[i]):>7.3f} "
            f"| {1.0:>6.2f} {float(sig.weights[i]):>7.3f} "
            f"{float(sig.weights[i] * grpo[i]):>7.3f} | "
            f"{float(ablation['D only'][i]):>6.2f} {float(ablation['C only'][i]):>6.2f} "
            f"{float(ablation['off'][i]):>4.1f}"
        )
    print("-" * len(head))
    for task in ("yes/no", "similarity"):
        rows = torch.tensor([t == task for t in tasks])
        share = float((sig.weights * grpo.abs())[rows].sum() / (sig.weights * grpo.abs()).sum())
        base = float(grpo.abs()[rows].sum() / grpo.abs().sum())
        print(f"share of Σ|w·A| on {task:<10}: GRPO {base:.2f}  HARGO {share:.2f}")
    print("stats:", {k: round(v, 4) for k, v in stats.items()})


if __name__ == "__main__":
    main()
