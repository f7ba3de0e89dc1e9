"""Reward of each bench status (the taxonomy itself: `status.py`).

`penalty` gives a failure status its reward (`BenchSettings.penalties`); an `ok` run gets
`shaped_reward` of its speed ratio to the reference timed in the same run (`speed_ratio`), or 0
when `is_suspicious`; `record_reward` is the one place that turns a record into a reward for
the trainer, the evaluation and SQD. The table of statuses, the shapings and the suspicious
bounds: docs/bench.md, "Status taxonomy and reward"; `record_reward`'s rule: docs/rewards.md,
"The reward of a record, decided once".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.status import UNSCORED


def penalty(status: str, settings: BenchSettings) -> float | None:
    """Reward of a failure status; None for infra_error (not the policy's fault)."""
    if status in UNSCORED:
        return None
    return float(getattr(settings.penalties, status))


MIN_CALL_SHARE = 0.1  # a call less the protocol's cost counts as at least this share of it


def speed_ratio(times: Sequence[float], ref_times: Sequence[float], *, threads: int = 1,
                allocated: int = 1, overhead: float | None = None,
                ref_overhead: float | None = None) -> float:  # fmt: skip
    """The speed ratio q of a run, from the pairs of calls the judge ran next to each other
    (t_r the candidate's seconds, u_r the reference's, on the same k threads):

        q = (k / T) * median_r (u'_r / t'_r)
        t'_r = max(t_r - o, s t_r),   o = min(o_c, o_r)
        u'_r = max(u_r - o_r, s u_r)                          s = MIN_CALL_SHARE (0.1)

    k (`threads`): the threads the kernel may use and the reference ran on: 1 for a kernel whose
    object starts no threads, else T (runner.kernel_threads). T (`allocated`): the threads the
    request was given. o_c, o_r (`overhead`, `ref_overhead`): the medians of the candidate's
    and the reference's empty calls (judge.c's empty_call: wake, no gemm, done, stop; None: no
    empty calls in the record, nothing is subtracted).

    Why each part:
    * pairs: the median of the pairs' ratios cancels what drifts between pairs (another job
      starting, the VM's speed level) better than the ratio of the two medians;
    * k threads on both sides: a serial kernel was timed next to a reference on all T threads,
      and load on the node slows a T-thread team (it waits for whichever thread was preempted)
      far more than one thread: its q moved with the load. With the same k on both sides the
      load hits both calls of a pair alike;
    * k / T: a k-thread reference scaled to T ideal threads (T/k times its speed) is the bar,
      so parallelism still pays: a kernel parallelised over T threads earns about T times the
      q of the same kernel serial (against the real T-thread reference, whose scaling loss
      it does not pay; for k = T the factor is 1 and q is the plain paired ratio);
    * o: every timed call includes the protocol's own cost (about an empty call), which is not
      the kernel's and at 128^3 is a large share of a fast kernel's call: it pulled q toward 1.
      The reference's o_r is trusted (its binary is the project's); the candidate's empty
      calls run in its own process, whose code could slow them to inflate what is subtracted,
      so at most o_r is subtracted from the candidate (min: a kernel gains nothing by it);
    * s: at tiny sizes noise can make a call shorter than the median empty call; a call never
      counts as less than a tenth of its measured time, so no time is <= 0 (the verdict
      refuses a record with t_r or u_r <= 0) and the correction is bounded.
    """
    if overhead is None or ref_overhead is None:
        o = o_r = 0.0
    else:
        o, o_r = min(overhead, ref_overhead), ref_overhead
    share = MIN_CALL_SHARE
    ratios = [max(u - o_r, share * u) / max(t - o, share * t)
              for t, u in zip(times, ref_times, strict=True)]  # fmt: skip
    return threads / allocated * statistics.median(ratios)


def is_suspicious(gflops: float, peak_bound: float | None, ref_best: float | None,
                  settings: BenchSettings) -> bool:  # fmt: skip
    """True when an ok run's median GFLOPS g is above what no kernel can honestly reach:

        g > peak_bound                    (peak_margin x the node's theoretical peak: peak.py)
        g > reference_margin x ref_best   (only where `reference_margin` is set: off by
                                           default, the reference may run a generic kernel)

    peak_bound None (not derived) and ref_best None (no reference) check nothing.
    """
    if peak_bound is not None and gflops > peak_bound:
        return True
    margin = settings.reference_margin
    return margin is not None and ref_best is not None and gflops > margin * ref_best


def shaped_reward(gflops: float, ratio: float | None, settings: BenchSettings) -> float:
    """Reward of an `ok` run from its median GFLOPS g and speed ratio q >= 0 to the reference,
    with scale s = `reward_scale`:

        scaled  r = s * 100 * q               for q <= 1   (default: percent of the reference)
                r = s * 100 * (2 - 1/q)       for q > 1    (concave, bounded: range [0, 200 s))
        log     r = s * 100 * log10(1 + 9 q)               (range [0, inf): 100 s at q = 1,
                                                            127.9 s at q = 2, 166.3 s at q = 5)
        raw     r = s * g                                  (GFLOPS: machine-dependent, debugging)

    Every shape is strictly increasing in q (raw in g) over its whole range; `scaled` is
    continuous with a continuous slope at q = 1 (100 s on both sides), so a kernel twice as fast
    as the reference earns 150 s, five times 180 s. Without a ratio (no reference), raw.
    """
    s = settings.reward_scale
    if settings.shaping == "raw" or ratio is None:
        return s * gflops
    q = max(ratio, 0.0)
    if settings.shaping == "scaled":
        return s * 100.0 * (q if q <= 1.0 else 2.0 - 1.0 / q)
    return s * 100.0 * math.log10(1.0 + 9.0 * q)


def record_reward(record: Mapping[str, Any], *, missing: Sequence[str] = (),
                  penalty: float | None = None) -> float | None:  # fmt: skip
    """The reward of one bench result record, for everyone who reads one: the GEMM task
    (`Gemm.reward_from_record`: the trainer's reward router, the evaluation's reward_mean) and
    SQD, which passes the techniques its stage requires that the kernel lacks (`missing`,
    `Sqd.required_miss`) and their `penalty` (bench.penalties.format_violation). First match:

        status infra_error, or `scored` false      None  (not a reward: the row is unscored)
        `reward` missing or not a finite number    None
        status ok and `missing` not empty          penalty
        otherwise                                  record["reward"]  (the bench's: the table
                                                                     above, `shaped_reward`)

    ValueError when `missing` needs a penalty and none was given.
    """
    if record.get("status") in UNSCORED or record.get("scored") is False:
        return None
    reward = record.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        return None
    if missing and record.get("status") == "ok":
        if penalty is None:
            raise ValueError(f"techniques {', '.join(missing)} are missing but no penalty is set")
        return float(penalty)
    return float(reward)
