"""The judge's protocol without running it: canned fd-3 transcripts (written from judge.c's
`say` calls and exit codes) through `parse_verdict`; the judge's argv against judge.c's usage
line and argv[] reads; the sandbox's defences and the judge's SANDBOX facts as record lines."""

from __future__ import annotations

import re
import signal
import time
from dataclasses import fields, replace
from importlib import resources

import pytest

from hargo_hpc.bench import defences, namespaces
from hargo_hpc.bench.defences import Job, Limits, judge_layers, plan_defences
from hargo_hpc.bench.judge_args import JudgeArgs
from hargo_hpc.bench.verdict import EXEC_FAILED, JudgeExit, Verdict, parse_verdict

ARGS = JudgeArgs("k.bin", "ref.bin", 100, 100, 100, 97, 97, 97, 1, 2, 2, 0, 0, 61001, 61001, 2,
                 1000, 3000, 1 << 20)  # fmt: skip
HEAD = ["READY", "SANDBOX uid=61001 rt=on"]
STARTED = [*HEAD, "SANDBOX seccomp=on"]
TIMED = ["TIME 1.000000000e-03", "TIME 1.100000000e-03", "REF 5.000000000e-04",
         "REF 5.000000000e-04", "CPU 1.0e-03 1.0e-03", "CPU 1.1e-03 1.1e-03",
         "KEYS 00000000000000a1 00000000000000b2 00000000000000c3 00000000000000d4"]  # fmt: skip


def ended(code: int | None = 0, sig: int | None = None, *, timed_out: bool = False,
          wall: float = 0.5) -> JudgeExit:  # fmt: skip
    return JudgeExit(code, sig, timed_out, wall, 3.0)


def verdict(lines: list[str], exit: JudgeExit | None = None) -> Verdict:
    return parse_verdict(exit or ended(), lines, ARGS)


# ------------------------------------------------------------------ transcripts


def test_ok_carries_the_timed_calls_and_the_sandbox_facts() -> None:
    v = verdict([*STARTED, *TIMED, "RESULT ok"])
    assert (v.status, v.reason, v.suspicious) == ("ok", "", False)
    assert v.timing.times == (1e-3, 1.1e-3) and v.timing.reference == (5e-4, 5e-4)
    assert v.timing.keys[0] == "00000000000000a1" and len(v.timing.keys) == 4
    assert v.facts == {"uid": "61001", "rt": "on", "seccomp": "on"}
    fields_ = v.timing.record_fields(2_000_000, 2)  # k = T = 2: q is the plain paired ratio
    assert fields_["gflops"]["median"] == pytest.approx(1.9048, abs=1e-4)
    # the median of the pairs' ratios 0.5 / 1.0 and 0.5 / 1.1
    assert fields_["reference_gflops"]["median"] == 4.0 and fields_["ratio"] == 0.477273


EMPTY = ["NOOP 1.0e-04", "NOOP 3.0e-04", "REFNOOP 1.0e-04", "REFNOOP 1.0e-04",
         "REFCPU 5.0e-04 5.0e-04", "REFCPU 4.9e-04 5.0e-04"]  # fmt: skip


def test_the_empty_calls_are_read_recorded_and_subtracted() -> None:
    """Issue U 5: one empty call of each child per pair (NOOP, REFNOOP), the reference's CPU
    per call (REFCPU). Medians o_c = 0.2 ms, o_r = 0.1 ms: min(o_c, o_r) = 0.1 ms comes off the
    candidate's calls (1.0 -> 0.9, 1.1 -> 1.0 ms), o_r off the reference's (0.5 -> 0.4 ms):
    ratios 0.444, 0.4 -> median 0.422222; with k = T = 2 (ARGS) no scaling."""
    v = verdict([*STARTED, *TIMED, *EMPTY, "RESULT ok"])
    assert v.status == "ok" and v.timing.empty == (1e-4, 3e-4)
    assert v.timing.reference_empty == (1e-4, 1e-4) and v.timing.threads == 2
    fields_ = v.timing.record_fields(2_000_000, 2)
    assert fields_["call_overhead_us"] == {"candidate": 200.0, "reference": 100.0}
    assert fields_["ratio"] == pytest.approx((0.4 / 0.9 + 0.4 / 1.0) / 2, abs=1e-6)
    assert fields_["reference_threads"] == 2
    assert fields_["times_s"]["reference_cpu"] == [5e-4, 4.9e-4]
    # a serial kernel's run (k = 1) of a 2-thread request: half of it
    serial = parse_verdict(ended(), [*STARTED, *TIMED, *EMPTY, "RESULT ok"],
                           replace(ARGS, threads=1)).timing.record_fields(2_000_000, 2)  # fmt: skip
    assert serial["ratio"] == pytest.approx(fields_["ratio"] / 2, abs=1e-6)
    assert serial["reference_threads"] == 1
    # a judge before the empty calls: no overhead known, nothing subtracted
    assert verdict([*STARTED, *TIMED, "RESULT ok"]).timing.record_fields(
        2_000_000, 2)["call_overhead_us"] is None


@pytest.mark.parametrize("lines", [
    EMPTY[1:],  # one NOOP of two
    [EMPTY[0], EMPTY[1]],  # no REFNOOP
    ["NOOP -1e-4", *EMPTY[1:]],
    ["NOOP nan", *EMPTY[1:]],
    ["NOOP", *EMPTY[1:]],
    [*EMPTY[:4], EMPTY[4]],  # one REFCPU of two
    [*EMPTY[:4], "REFCPU -1 5e-4", EMPTY[5]],
])  # fmt: skip
def test_damaged_empty_calls_are_refused(lines) -> None:
    v = verdict([*STARTED, *TIMED, *lines, "RESULT ok"])
    assert v.status == "runtime_error" and "damaged" in v.reason, lines


def test_the_empty_calls_count_in_the_run_time() -> None:
    # the timed calls sum to 3.1 ms; with 2 x 0.3 s of empty calls they exceed a 0.5 s run
    lines = [*STARTED, *TIMED, "NOOP 0.3", "NOOP 0.3", "REFNOOP 1e-4", "REFNOOP 1e-4", "RESULT ok"]
    v = verdict(lines)
    assert v.status == "runtime_error" and "impossible timing record" in v.reason


@pytest.mark.parametrize(("result", "code", "status", "reason"), [
    ("RESULT wrong row 3 of C is wrong", 3, "wrong_result", "row 3 of C is wrong"),
    ("RESULT inputs A or B were modified", 5, "wrong_result", "inputs A or B were modified"),
    ("RESULT memory wrote outside the buffers", 4, "runtime_error", "wrote outside the buffers"),
    ("RESULT timeout timed call 2 took over 3 s", 7, "timeout", "timed call 2 took over 3 s"),
    ("RESULT infra the reference process died (status 9)", 90, "infra_error",
     "the reference process died (status 9)"),
])  # fmt: skip
def test_the_judges_result_lines(result, code, status, reason) -> None:
    assert verdict([*STARTED, result], ended(code)) == Verdict(status, reason,
                                                              facts=verdict(STARTED).facts)


@pytest.mark.parametrize(("child", "status", "reason"), [
    ("CHILD signal 11", "runtime_error", "killed by SIGSEGV"),
    ("CHILD signal 6", "runtime_error", "killed by SIGABRT"),
    ("CHILD signal 31", "runtime_error", "forbidden system call (killed by seccomp)"),
    ("CHILD signal 24", "timeout", "CPU-time limit exceeded"),
    ("CHILD signal 25", "runtime_error", "output over 1048576 bytes (killed)"),  # output flood
    (f"CHILD signal {signal.SIGRTMIN + 1}", "runtime_error", "killed by SIGRTMIN+1"),
    ("CHILD signal 77", "runtime_error", "killed by signal 77"),
    ("CHILD exit 0", "runtime_error", "the kernel's process exited before the judge finished "
                                      "(exit() in the kernel?)"),
    ("CHILD exit 90", "runtime_error", "exit status 90"),
    ("CHILD exec 2", EXEC_FAILED, "cannot exec the kernel's binary: No such file or directory"),
    ("CHILD exec 12", "runtime_error", "the kernel's binary cannot be loaded: Cannot allocate "
                                       "memory (static data over the memory limit?)"),
    ("CHILD load 31", "runtime_error", "forbidden system call while its binary was loading "
                                       "(killed by seccomp: a constructor or resolver)"),
    ("CHILD load 11", "runtime_error", "the kernel's binary cannot be loaded (killed by SIGSEGV "
                                       "while loading: static data over the memory limit, or a "
                                       "crashing constructor)"),
])  # fmt: skip
def test_the_kernels_death_as_the_judge_reports_it(child, status, reason) -> None:
    v = verdict([*HEAD, child], ended(6))  # the judge exits 6 after a CHILD line
    assert (v.status, v.reason) == (status, reason)


def test_a_child_line_replaces_a_forged_result() -> None:
    v = verdict([*STARTED, *TIMED, "CHILD exit 0", "RESULT ok"], ended(6))
    assert v.status == "runtime_error" and "exited before the judge finished" in v.reason


def test_the_wall_clock_wins() -> None:
    v = verdict([*STARTED, "TIME 1e-3"], ended(None, signal.SIGKILL, timed_out=True, wall=3.0))
    assert (v.status, v.reason) == ("timeout", "run exceeded 3 s (process group killed)")


@pytest.mark.parametrize(("lines", "exit", "reason"), [
    (["INFRA cannot map the candidate's memory"], ended(90), "cannot map the candidate's memory"),
    ([], ended(91), "the judge did not start (exit status 91)"),
    ([], ended(None, signal.SIGKILL), "the judge did not start (exit status None, SIGKILL)"),
    (["RESULT ok", *TIMED], ended(0), "the judge did not start (exit status 0)"),  # no READY
])  # fmt: skip
def test_before_ready_everything_is_the_harnesss(lines, exit, reason) -> None:
    assert (verdict(lines, exit).status, verdict(lines, exit).reason) == ("infra_error", reason)


def test_signals_of_the_judge_itself() -> None:
    v = verdict(STARTED, ended(None, signal.SIGXFSZ))
    assert (v.status, v.reason) == ("runtime_error", "output over 1048576 bytes (killed)")
    assert verdict(STARTED, ended(None, signal.SIGSEGV)).reason == "killed by SIGSEGV"
    assert verdict(HEAD, ended(None, signal.SIGSYS)).reason.startswith("forbidden system call")


@pytest.mark.parametrize(("lines", "code", "reason"), [
    ([*STARTED, "TIME 1e-3"], 0, "exited before the judge finished"),  # truncated: no RESULT
    ([*STARTED, "TIME 1e-3"], 6, "exit status 6"),
    ([*STARTED, "TIME abc", "TIME 1e-3", "REF 1e-3", "REF 1e-3", "RESULT ok"], 0, "damaged"),
    ([*STARTED, "TIME", "RESULT ok"], 0, "damaged"),
    ([*STARTED, TIMED[0], *TIMED[2:], "RESULT ok"], 0, "damaged"),  # one TIME of two
    ([*STARTED, "TIME nan", "TIME 1e-3", "REF 1e-3", "REF 1e-3", "RESULT ok"], 0, "damaged"),
    ([*STARTED, "TIME -1", "TIME 1e-3", "REF 1e-3", "REF 1e-3", "RESULT ok"], 0, "damaged"),
    ([*STARTED, "TIME 0.3", "TIME 0.3", "REF 0.3", "REF 0.3", "RESULT ok"], 0,
     "impossible timing record: the timed calls sum to 1.200 s in a run of 0.500 s"),
    ([*STARTED, "CHILD signal", "RESULT ok"], 0, "damaged"),  # a CHILD line without its number
    ([*STARTED, "RESULT okay"], 0, "exited before the judge finished"),
    ([*STARTED, "RESULT ok"], 3, "exit status 3"),
    (["garbage", "READY?", "\x00\xff", "RESULT"], 1, "the judge did not start"),
])  # fmt: skip
def test_malformed_or_truncated_records(lines, code, reason) -> None:
    v = verdict(lines, ended(code))
    assert v.status in ("runtime_error", "infra_error") and reason in v.reason, v


def test_cpu_outside_the_timed_window_is_suspicious_and_ok() -> None:
    lines = [*STARTED, *TIMED[:4], "CPU 1e-3 1e-3", "CPU 9e-3 1e-3", "RESULT ok"]
    v = verdict(lines)
    assert v.status == "ok" and v.suspicious and "9.0 ms of CPU in a call of 1.0 ms" in v.reason
    assert not verdict([*STARTED, *TIMED[:4], "CPU 2.1e-3 1e-3", "RESULT ok"]).suspicious


def test_an_output_flood_on_the_channel_is_a_damaged_record_in_bounded_time() -> None:
    flood = [*STARTED, *(["TIME 1e-9"] * 200_000), "REF 1e-9", "RESULT ok"]
    start = time.monotonic()
    v = verdict(flood)
    assert v.status == "runtime_error" and "damaged" in v.reason
    junk = verdict(["READY", *(["x" * 1000] * 1000)])
    assert junk.status == "runtime_error" and time.monotonic() - start < 5.0


def test_first_result_and_last_sandbox_fact_count() -> None:
    v = verdict([*STARTED, "RESULT wrong first", "RESULT ok"], ended(3))
    assert v.reason == "first"
    assert verdict([*STARTED, "SANDBOX seccomp=off", "RESULT wrong x"]).facts["seccomp"] == "off"


# ------------------------------------------------------------------ the judge's argv


def judge_source() -> str:
    return resources.files("hargo_hpc.bench").joinpath("judge.c").read_text()


def test_judge_args_follow_judge_cs_usage_line_and_argc() -> None:
    usage = re.search(r"\* +judge (.*?)\n \*\n", judge_source(), re.S).group(1)
    names = [w for w in usage.split() if w != "*"]
    assert names == [f.name.upper() for f in fields(JudgeArgs)]
    assert f"argc != {len(fields(JudgeArgs)) + 1}" in judge_source()


def test_judge_args_are_where_judge_cs_main_reads_them() -> None:
    """Each `name = ato*(argv[i])` (and the two paths) in main() is field i - 1."""
    src = judge_source()
    main = src[src.index("int main(int argc, char **argv)"):]
    reads = dict(re.findall(r"(\w+) = (?:ato\w+|strtoull)\(argv\[(\d+)\]", main))
    reads.update(re.findall(r"\*?(\w+) = argv\[(\d+)\]", main))
    sizes = re.search(r"sizes\[2\]\[3\] = \{\{(.*?)\}\};", main, re.S).group(1)
    for i, name in zip(re.findall(r"argv\[(\d+)\]", sizes), ("m", "n", "k", "m2", "n2", "k2"),
                       strict=True):  # fmt: skip
        reads[name] = i
    c_names = {"cand_path": "candidate", "ref_path": "reference", "min_reps": "reps",
               "budget_s": "budget_ms", "untimed_s": "untimed_ms", "call_s": "call_ms",
               "output_limit": "output"}  # fmt: skip
    position = {c_names.get(c, c): int(i) for c, i in reads.items()}
    assert position == {f.name: i + 1 for i, f in enumerate(fields(JudgeArgs))}


def test_judge_args_round_trip() -> None:
    argv = ARGS.to_argv("/cache/judge")
    assert argv[0] == "/cache/judge" and len(argv) == 20 and argv[14] == "61001"
    assert JudgeArgs.from_argv(argv) == ARGS
    with pytest.raises(ValueError, match="19 arguments"):
        JudgeArgs.from_argv(argv[:-1])


# ------------------------------------------------------------------ defences


def test_defences_in_force_and_missing(monkeypatch) -> None:
    lim = Limits(wall_s=1, cpu_s=1, address_space_mb=64)
    monkeypatch.setattr(namespaces, "netns_mode", lambda: "root")
    monkeypatch.setattr(namespaces, "mountns_mode", lambda: "root")
    job = Job("/w", lim, ids=(61001, 61001), view=["/usr"])
    force, missing = plan_defences(job)
    assert [d.label(job) for d in force if d.recorded] == [
        "tempdir", "pgroup", "env", "rlimits", "uid:61001", "netns", "mountns"]
    assert missing == []
    monkeypatch.setattr(namespaces, "netns_mode", lambda: None)
    monkeypatch.setattr(namespaces, "mountns_mode", lambda: None)
    force, missing = plan_defences(Job("/w", lim, view=["/usr"]))
    assert [d.name for d in force] == ["tempdir", "pgroup", "env", "rlimits"]
    assert missing == [defences.NetNs.missing, defences.MountNs.missing]
    assert plan_defences(Job("/w", lim, network=True))[1] == []  # not asked: not missing


def test_the_child_applies_the_cgroup_before_the_rlimits_and_the_uid_last() -> None:
    steps = {d.name: d.step for d in defences.DEFENCES}
    assert steps["mountns"] < steps["cgroup"] < steps["rlimits"] < steps["uid"]


@pytest.mark.parametrize(("facts", "force", "missing"), [
    ({"uid": "61001", "rt": "on", "seccomp": "on"}, ["uid:61001", "seccomp", "rt-priority"], []),
    ({"uid": "-1", "rt": "off", "seccomp": "off"}, [],
     ["uid (the worker is not root: the kernel keeps its uid)",
      "seccomp (not supported on this machine)",
      "rt-priority (not permitted: other load on the node slows threaded kernels and the "
      "reference unevenly)"]),
    ({}, [], ["uid (the worker is not root: the kernel keeps its uid)"]),
])  # fmt: skip
def test_the_judges_sandbox_facts_as_record_lines(facts, force, missing) -> None:
    assert judge_layers(facts) == (force, missing)
