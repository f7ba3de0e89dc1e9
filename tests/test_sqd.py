"""SQD on its own: stage advancement over result sequences worked out by hand, the archive,
the state's round trip and its file with a backup, and the schedule's checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from hargo_hpc.sqd import (
    ProblemState,
    Result,
    Sqd,
    SqdError,
    SqdSettings,
    StageSpec,
    archive_key,
    load_state_file,
    step_problem,
)


def ok(gflops: float, techniques: tuple[str, ...] = (), rid: str = "r0") -> dict[str, Any]:
    return {"status": "ok", "gflops": {"median": gflops}, "ratio": gflops / 100,
            "techniques": list(techniques), "request_id": rid, "reward": gflops}


def test_a_problem_advances_after_patience_steps_without_a_five_percent_gain() -> None:
    settings = SqdSettings(patience=2, min_improvement=0.05, max_steps=50)
    state = ProblemState()
    # step:       1     2      3      4     5      6
    # best g:     10    10.4   10.6   11    0      11.4
    # vs mark:    new   <10.5  >=10.5 <11.13 fail  >=11.13?  (mark after 3 is 10.6: 11 >= 11.13
    #             is false -> stale 1; step 5 fails -> stale 2 -> advance)
    seen = []
    for step, values in enumerate([[10.0], [10.4], [10.6, 3.0], [11.0], []], start=1):
        seen.append((step_problem(state, values, step, settings) != "", state.stage))
    assert seen == [(False, 0), (False, 0), (False, 0), (False, 0), (True, 1)]
    # step 2: 10.4 < 10.5 -> stale 1; step 3: 10.6 >= 10.5 -> mark 10.6, stale 0;
    # step 4: 11.0 < 11.13 -> stale 1; step 5: nothing ok -> stale 2 -> stage 1, counters reset
    assert (state.seen, state.mark, state.best, state.stale) == (0, 0.0, 0.0, 0)
    assert state.history == [{"step": 5, "stage": 1,
                              "why": "no 5% gain in 2 steps"}]


def test_a_stage_without_an_ok_kernel_yet_does_not_plateau() -> None:
    """Failing steps before the first ok kernel are no plateau (m = 0): the problem stays
    until it solves the stage (then the plateau rule runs) or max_steps moves it on."""
    settings = SqdSettings(patience=2, max_steps=6)
    state = ProblemState()
    for step in range(1, 5):  # 4 failing steps: past patience, still stage 0
        assert step_problem(state, [], step, settings) == ""
    assert (state.stage, state.stale, state.mark) == (0, 0, 0.0)
    assert step_problem(state, [5.0], 5, settings) == ""  # solved: mark 5, stale 0
    assert step_problem(state, [], 6, settings) == "6 steps in the stage"  # max_steps
    never = ProblemState()
    moved = [step_problem(never, [], step, settings) for step in range(1, 7)]
    assert moved == [""] * 5 + ["6 steps in the stage"] and never.stage == 1


def test_max_steps_moves_a_problem_that_keeps_improving() -> None:
    settings = SqdSettings(patience=5, max_steps=3)
    state = ProblemState()
    stages = []
    for step in range(1, 8):
        step_problem(state, [10.0 * 1.1 ** step], step, settings)
        stages.append(state.stage)
    assert stages == [0, 0, 1, 1, 1, 2, 2]  # 3 steps a stage, then the next


@pytest.mark.parametrize(("after_last", "want"), [("hold", [2] * 6),
                                                  ("cycle", [2, 0, 0, 1, 1, 2])])
def test_after_the_last_stage(after_last: str, want: list[int]) -> None:
    settings = SqdSettings(patience=1, after_last=after_last)  # 3 stages
    state = ProblemState(stage=2)
    got = []
    for step in range(6):  # 5 GFLOPS every step: the first in a stage sets the mark, the
        step_problem(state, [5.0], step, settings)  # next is no gain: patience 1 moves on
        got.append(state.stage)
    assert got == want
    assert state.cycles == (1 if after_last == "cycle" else 0)


def test_observe_archives_the_best_per_technique_set_and_skips_failures() -> None:
    sqd = Sqd(SqdSettings(patience=10, max_steps=50), ["p256", "p512"])
    sqd.observe(1, [Result("p256", "code a", ok(5.0, ("blocking",), "a")),
                    Result("p256", "code b", ok(7.0, ("blocking",), "b")),
                    Result("p256", "code c", ok(3.0, (), "c")),
                    Result("p256", "bad", {"status": "compile_error"}),
                    Result("p512", "sus", {**ok(90.0, (), "s"), "suspicious": True})])
    sqd.observe(2, [Result("p256", "code d", ok(6.0, ("blocking",), "d"))])  # not better
    assert sorted(sqd.archive) == ["p256|blocking", "p256|none"]
    best = sqd.archive[archive_key("p256", ["blocking"])]
    assert (best.code, best.gflops, best.step, best.stage, best.request_id) == (
        "code b", 7.0, 1, "open", "b")  # p256 starts at stage 0, p512 at 1 (spread)
    assert best.ratio == pytest.approx(0.07)
    assert archive_key("p", ["simd", "openmp"]) == "p|openmp+simd"  # the vocabulary's order
    assert sqd.metrics() == {"sqd/stage_mean": 0.5, "sqd/archive_size": 2.0,  # stages 0, 1
                             "sqd/bonus_mean": 0.0}  # no bonuses asked for


def test_a_required_technique_missing_keeps_the_result_out() -> None:
    stages = [StageSpec(name="threads", require=["openmp"])]
    sqd = Sqd(SqdSettings(stages=stages, patience=1), ["p"])
    assert sqd.required_miss("p", ok(5.0, ("simd",))) == ["openmp"]
    assert sqd.required_miss("p", ok(5.0, ("openmp", "simd"))) == []
    sqd.observe(1, [Result("p", "x", ok(5.0, ("simd",)))])
    assert sqd.archive == {}


def test_an_ok_kernel_off_its_stage_is_neither_progress_nor_an_elite() -> None:
    """The bench judged the code, then found a forbidden technique (`off_stage`, reward -5):
    the kernel ran, but not as the stage asked."""
    sqd = Sqd(SqdSettings(patience=1), ["p"])
    off = {**ok(50.0, ("openmp",), "o"), "off_stage": ["openmp"], "reward": -5.0}
    sqd.observe(1, [Result("p", "omp", off)])
    assert sqd.archive == {} and sqd.problems["p"].stale == 0  # no mark to plateau at
    sqd.observe(2, [Result("p", "plain", ok(5.0, (), "p"))])
    assert list(sqd.archive) == ["p|none"]


def test_the_archive_pays_a_new_or_better_elite_and_a_rare_cell_never_a_failure() -> None:
    """Sqd.bonuses by hand: B [cell empty or g >= best (1 + margin)] + N / sqrt(1 + n), for
    on-stage ok kernels only, against the archive before the step."""
    settings = SqdSettings(bonus=10.0, bonus_margin=0.05, novelty=4.0, patience=50,
                           max_steps=50)  # fmt: skip
    sqd = Sqd(settings, ["p"])  # one problem: stage 0, open
    first = [Result("p", "a", ok(5.0, ("blocking",))), Result("p", "b", ok(5.0, ("blocking",))),
             Result("p", "c", {"status": "compile_error"}),
             Result("p", "d", {**ok(9.0, ("openmp",)), "off_stage": ["openmp"]}),
             Result("p", "e", {**ok(9.0), "suspicious": True})]
    assert sqd.bonuses(first) == [14.0, 14.0, 0.0, 0.0, 0.0]  # an empty cell: 10 + 4 / 1
    sqd.observe(1, first)  # the blocking cell: best 5.0, n = 2; nothing else archived
    assert sqd.counts == {"p|blocking": 2} and list(sqd.archive) == ["p|blocking"]
    second = [Result("p", "f", ok(5.2, ("blocking",))),  # < 5.0 x 1.05: novelty only
              Result("p", "g", ok(5.3, ("blocking",))),  # a better elite
              Result("p", "h", ok(1.0))]  # a new cell, however slow
    got = sqd.bonuses(second)
    assert got == pytest.approx([4 / 3 ** 0.5, 10 + 4 / 3 ** 0.5, 14.0])
    assert sqd.metrics()["sqd/bonus_mean"] == pytest.approx(sum(got) / 3)
    off = Sqd(SqdSettings(bonus=0.0, novelty=0.0), ["p"])  # the ablation's switches
    assert off.bonuses(first) == [0.0] * 5


def test_the_state_round_trips_and_its_file_keeps_a_backup(tmp_path: Path) -> None:
    settings = SqdSettings(patience=1)
    sqd = Sqd(settings, ["p"])
    sqd.observe(1, [Result("p", "k1", ok(4.0))])
    sqd.save(tmp_path, 1, [Result("p", "k1", ok(4.0))])
    failed = [Result("p", "k2", {"status": "compile_error"})]
    sqd.observe(2, failed)  # prompted, no ok result: no gain, patience 1 -> stage 1
    sqd.observe(3, [])  # not prompted this step: nothing changes
    sqd.save(tmp_path, 2, failed)
    again = Sqd(settings, ["p"])
    again.load_state_dict(load_state_file(tmp_path / "state.json"))
    assert again.state_dict() == sqd.state_dict() and again.stage_of("p").name == "no_simd"
    backup = json.loads((tmp_path / "state.json.bak").read_text())
    assert backup["problems"]["p"]["stage"] == 0  # the version before
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert lines == [{"step": 1, "problem": "p", "stage": "open", "status": "ok",
                      "gflops": 4.0, "ratio": 0.04, "reward": 4.0, "techniques": []},
                     {"step": 2, "problem": "p", "stage": "open", "status": "compile_error",
                      "gflops": None, "ratio": None, "reward": None, "techniques": []}]

    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(SqdError, match=r"cannot read the SQD state .* previous version is "):
        load_state_file(tmp_path / "state.json")
    other = Sqd(SqdSettings(stages=[StageSpec(name="only")]), ["p"])
    with pytest.raises(SqdError, match=r"written for stages \['open', 'no_simd'"):
        other.load_state_dict(sqd.state_dict())


@pytest.mark.parametrize(("stages", "message"), [
    ([], "at least 1 item"),
    ([{"name": "a", "forbid": ["gpu"]}], "unknown technique 'gpu'"),
    ([{"name": "a", "forbid": ["omp"], "require": ["openmp"]}], "openmp both required and "),
    ([{"name": "a"}, {"name": "a"}], "stage names repeat"),
])
def test_a_bad_schedule_is_refused(stages: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SqdSettings.model_validate({"stages": stages})


def test_the_default_schedule_is_open_then_one_technique_left_out_a_stage() -> None:
    settings = SqdSettings()
    assert [(s.name, s.forbid, s.open) for s in settings.stages] == [
        ("open", [], True), ("no_simd", ["simd"], False), ("no_blocking", ["blocking"], False)]
    assert (settings.patience, settings.max_steps, settings.after_last, settings.start) == (
        2, 2, "cycle", "spread")


def test_problems_start_spread_over_the_stages_and_count_their_visits() -> None:
    """The i-th problem in name order starts at stage i mod 3, so a batch of problems mixes
    stages; every step a problem is prompted in counts one visit of its prompt's stage."""
    names = [f"p{i}" for i in range(6)]
    sqd = Sqd(SqdSettings(), list(reversed(names)))
    assert [sqd.problems[n].stage for n in names] == [0, 1, 2, 0, 1, 2]
    assert [s.stage for s in Sqd(SqdSettings(start="first"), names).problems.values()] == [0] * 6
    # p0 prompted twice in its open stage (two results in step 1 count one visit), never
    # solving it: max_steps 2 moves it on; then once in no_simd
    sqd.observe(1, [Result("p0", "a", {"status": "compile_error"}),
                    Result("p0", "b", {"status": "compile_error"})])
    sqd.observe(2, [Result("p0", "c", {"status": "compile_error"})])
    sqd.observe(3, [Result("p0", "d", ok(4.0))])
    assert sqd.problems["p0"].visits == {"open": 2, "no_simd": 1}
    assert sqd.problems["p0"].stage == 1 and sqd.problems["p1"].visits == {}
    # a problem at the last stage cycles back to the first
    for step in (4, 5):
        sqd.observe(step, [Result("p2", "e", {"status": "compile_error"})])
    assert (sqd.problems["p2"].stage, sqd.problems["p2"].cycles) == (0, 1)


def test_hargo_sqd_stages_prints_the_schedule_of_a_job() -> None:
    from click.testing import CliRunner

    from hargo_hpc.cli import main

    repo = Path(__file__).resolve().parents[1]
    done = CliRunner().invoke(main, ["sqd", "stages", str(repo / "jobs" / "gemm_sqd.toml")])
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert [line.split()[0] for line in lines[1:4]] == ["open", "no_simd", "no_blocking"]
    assert lines[2].split()[1:] == ["openmp,", "blocking,", "unrolling", "simd", "-"]
    assert "gains less than 5% for 2 steps, or after 2 steps" in lines[4]
    assert "after the last: cycle; start: spread" in lines[4]


def test_hargo_sqd_report_on_a_corrupt_state_names_the_backup(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from hargo_hpc.cli import main

    sqd = Sqd(SqdSettings(), ["p"])
    sqd.save(tmp_path / "sqd", 1, [Result("p", "k", ok(3.0, ("blocking",)))])
    sqd.save(tmp_path / "sqd", 2, [])
    good = CliRunner().invoke(main, ["sqd", "report", str(tmp_path)])
    assert good.exit_code == 0 and "p: stage open (1 results, 0 cycles)" in good.output
    assert "  visits: none" in good.output  # saved, never observed: no visit counted
    assert "problems by stages visited: 0 stage(s) 1" in good.output
    (tmp_path / "sqd" / "state.json").write_text("{torn")
    bad = CliRunner().invoke(main, ["sqd", "report", str(tmp_path)])
    assert bad.exit_code == 2
    assert "cannot read the SQD state" in bad.output and "state.json.bak" in bad.output
    missing = CliRunner().invoke(main, ["sqd", "report", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "sqd.enabled" in missing.output
