"""One list of #SBATCH options for both batch paths: the rendered templates and the batch file
submitit writes (rendered by submitit itself, without submitting) carry the same options."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
from submitit.core.job_environment import JobEnvironment
from submitit.slurm.slurm import _make_sbatch_string

from hargo_hpc.config import JobResources
from hargo_hpc.slurm import make_executor, render_script, slurm_parameters
from hargo_hpc.slurm.options import minutes, sbatch_line, sbatch_options, signal_lead_s
from hargo_hpc.slurm.render import TEMPLATE_DIR_ENV

# What submitit writes on its own: its log files and accounting key.
SUBMITIT_OWNED = {"output", "error", "open-mode", "wckey"}

SHAPES = {
    "cpu-default": (JobResources(), ""),
    "gpu": (JobResources(partition="gpu", gpus_per_node=2, cpus_per_task=4, mem="32G",
                         time="1-12:00:00"), ""),
    "array-parallelism": (JobResources(cpus_per_task=2, time="00:10:00", array_parallelism=3),
                          "0-7"),
    "array-no-limit": (JobResources(time="45"), "0-4"),
    "account-qos-constraint-extra": (
        JobResources(nodes=2, ntasks_per_node=4, account="proj42", qos="high",
                     constraint="skylake&ib", time="02:30",
                     extra=["--exclusive", "--mail-type=END", "--comment=two words",
                            "--reservation maint"]),
        "",
    ),
}


def parse_sbatch(script: str) -> list[tuple[str, str]]:
    """(name, value) of each `#SBATCH --name[=value]` line, values unquoted as sbatch does."""
    options = []
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            (word,) = shlex.split(line[len("#SBATCH"):])
            name, _, value = word.removeprefix("--").partition("=")
            options.append((name, value))
    return options


def submitit_script(resources: JobResources, folder: Path, job_name: str,
                    tasks: int | None) -> str:
    """The batch file submitit would submit for `make_executor(...)` (an array of `tasks`)."""
    executor = make_executor(resources, folder, backend="slurm", job_name=job_name)
    return _make_sbatch_string(command="python -m submitit.core._submit", folder=folder,
                               map_count=tasks, **executor._executor.parameters)


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_template_and_submitit_carry_the_same_options(shape: str, tmp_path: Path) -> None:
    resources, array = SHAPES[shape]
    first, _, last = array.partition("-")
    tasks = int(last) - int(first) + 1 if array else None
    template = render_script("base.sh.j2", job_name=f"hargo-{shape}", resources=resources,
                             command="true", log_dir=tmp_path / "logs", array=array)
    ours = parse_sbatch(template)
    # the template writes exactly the options list, in its order
    expected = sbatch_options(resources, job_name=f"hargo-{shape}", array=array,
                              log_dir=tmp_path / "logs")
    assert [line for line in template.splitlines() if line.startswith("#SBATCH")] == \
        [sbatch_line(option) for option in expected]
    assert ours == expected
    theirs = parse_sbatch(submitit_script(resources, tmp_path / "submitit", f"hargo-{shape}",
                                          tasks))
    assert len({name for name, _ in theirs}) == len(theirs), theirs  # no option twice

    mine, sub = dict(ours), dict(theirs)
    assert mine.pop("output").startswith(f"{tmp_path}/logs/%x-")
    for name in SUBMITIT_OWNED:
        sub.pop(name, None)
    # the time warning: the same lead time; each path its own signal and receiver
    assert signal_lead_s(mine["signal"]) == signal_lead_s(sub["signal"]) \
        == resources.signal_lead_s
    assert mine.pop("signal").split("@")[0] == "B:USR1"  # to the batch shell (exec'd worker)
    assert sub.pop("signal").split("@")[0] == JobEnvironment.USR_SIG  # submitit's handler
    if array and not resources.array_parallelism:  # "no limit": submitit writes %<tasks>
        assert sub["array"] == f"{mine['array']}%{tasks}"
        sub["array"] = mine["array"]
    assert sub == mine


def test_the_bench_worker_template_uses_the_same_lines(tmp_path: Path) -> None:
    resources = JobResources(array_parallelism=2, extra=["--exclusive"])
    worker = "py -m hargo_hpc worker --handoff h --config c.toml --max-idle 5 --threads 1"
    script = render_script("bench_worker.sh.j2", job_name="w", resources=resources,
                           log_dir=tmp_path, array="0-1", commands=[worker, worker])
    assert parse_sbatch(script) == sbatch_options(resources, job_name="w", array="0-1",
                                                  log_dir=tmp_path)
    lines = script.rstrip().splitlines()
    assert f"    1) CMD=({worker}) ;;" in lines
    assert lines[-1] == 'exec "${CMD[@]}"'


def test_submitit_parameters_come_from_the_options() -> None:
    resources = JobResources(partition="gpu", gpus_per_node=1, time="00:00:30",
                             extra=["--gres-flags=enforce-binding", "--exclusive"])
    params = slurm_parameters(resources, ["module load gcc"], job_name="t")
    assert params["name"] == "t"
    assert params["slurm_gres"] == "gpu:1"
    assert params["slurm_signal_delay_s"] == 120  # JobResources.signal_lead_s's default
    assert params["timeout_min"] == 1  # submitit's bookkeeping, rounded up
    assert params["slurm_additional_parameters"] == {
        "time": "00:00:30", "gres_flags": "enforce-binding", "exclusive": True,
    }
    assert params["slurm_setup"] == ["module load gcc"]


def test_gres_in_extra_without_gpus_reaches_both_paths(tmp_path: Path) -> None:
    resources = JobResources(extra=["--gres=gpu:a100:2"])
    assert ("gres", "gpu:a100:2") in sbatch_options(resources, job_name="x")
    assert slurm_parameters(resources)["slurm_gres"] == "gpu:a100:2"
    assert "#SBATCH --gres=gpu:a100:2" in submitit_script(resources, tmp_path, "x", None)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-C gpu"], "write it in long form"),
        (["--partition=gpu"], "--partition is set by partition"),
        (["--signal=B:TERM@30"], "--signal is set by USR1, signal_lead_s before the time limit"),
        (["--output=x.log"], "--output is set by the job's log directory"),
        (["--mail-type=END", "--mail-type=FAIL"], "set by an earlier extra option"),
        (["--comment="], "empty value"),
    ],
)
def test_bad_extra_options_are_refused(extra: list[str], message: str) -> None:
    with pytest.raises(ValueError, match="slurm extra option") as err:
        sbatch_options(JobResources(extra=extra), job_name="x")
    assert message in str(err.value)
    with pytest.raises(ValueError, match=re.escape(message)):
        slurm_parameters(JobResources(extra=extra))


def test_gres_from_gpus_cannot_be_repeated_in_extra() -> None:
    with pytest.raises(ValueError, match="--gres is set by gpus_per_node"):
        sbatch_options(JobResources(gpus_per_node=1, extra=["--gres=gpu:2"]), job_name="x")


@pytest.mark.parametrize(
    ("limit", "expected"),
    [("30", 30), ("00:30", 1), ("05:00", 5), ("01:00:00", 60), ("00:00:01", 1),
     ("1-12", 2160), ("1-00:00:01", 1441), ("2-1:30", 2970), ("0-0:5", 5)],
)
def test_minutes(limit: str, expected: int) -> None:
    assert minutes(limit) == expected


@pytest.mark.parametrize("limit", ["a:b", "1:2:3:4", "1-2:3:4:5", ""])
def test_minutes_refuses_bad_limits(limit: str) -> None:
    with pytest.raises(ValueError, match="bad Slurm time limit"):
        minutes(limit)


def test_missing_template_names_where_it_looked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TEMPLATE_DIR_ENV, raising=False)
    with pytest.raises(FileNotFoundError) as err:
        render_script("nope.sh.j2", job_name="x", resources=JobResources())
    assert str(err.value) == ("no sbatch template 'nope.sh.j2' in the package's templates "
                              "(hargo_hpc.slurm/templates) (templates there: base.sh.j2, "
                              "bench_worker.sh.j2, eval.sh.j2, report.sh.j2, sft.sh.j2, "
                              "stop.sh.j2, train.sh.j2)")


def test_site_template_dir_overrides_the_package(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    (tmp_path / "base.sh.j2").write_text(
        "#!/bin/sh\n{% for line in sbatch_lines %}{{ line }}\n{% endfor %}# site {{ command }}\n"
    )
    (tmp_path / "only_site.sh.j2").write_text('{% extends "missing.sh.j2" %}')
    monkeypatch.setenv(TEMPLATE_DIR_ENV, str(tmp_path))
    script = render_script("base.sh.j2", job_name="s", resources=JobResources(), command="go")
    assert script.endswith("#SBATCH --signal=B:USR1@120\n# site go\n")
    with pytest.raises(FileNotFoundError) as err:  # the package's templates are not mixed in
        render_script("bench_worker.sh.j2", job_name="s", resources=JobResources())
    assert f"in {tmp_path} (${TEMPLATE_DIR_ENV})" in str(err.value)
    with pytest.raises(FileNotFoundError, match=r"no sbatch template 'missing\.sh\.j2'"):
        render_script("only_site.sh.j2", job_name="s", resources=JobResources())
    monkeypatch.setenv(TEMPLATE_DIR_ENV, os.fspath(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match=r"templates there: none"):
        render_script("base.sh.j2", job_name="s", resources=JobResources())


JOBS = sorted((Path(__file__).resolve().parents[2] / "jobs").glob("*.toml"))


@pytest.mark.parametrize("job", JOBS, ids=[p.stem for p in JOBS])
def test_submitit_asks_for_what_the_rendered_scripts_say(job: Path, tmp_path: Path) -> None:
    """For every job of every shipped experiment: the batch file submitit writes for it (its
    own renderer, nothing submitted) holds the rendered script's options, save the log files
    and the signal's receiver, and the same setup and job environment lines."""
    from hargo_hpc.config import load_config
    from hargo_hpc.slurm.options import JOB_ENVIRONMENT
    from hargo_hpc.slurm.submission import plan_submission, render_job
    from hargo_hpc.slurm.submitter import job_executor

    config = load_config(job, [f"run.dir={tmp_path}", 'slurm.setup=["module load gcc"]'])
    plan = plan_submission(config)
    for planned in plan.jobs:
        rendered = render_job(plan, planned)
        mine = dict(parse_sbatch(rendered))
        executor = job_executor(plan, planned, "slurm")
        submitted = _make_sbatch_string(command="python -u -m submitit.core._submit",
                                        folder=tmp_path / "submitit",
                                        map_count=planned.tasks if planned.tasks > 1 else None,
                                        **executor._executor.parameters)
        theirs = parse_sbatch(submitted)
        assert len({name for name, _ in theirs}) == len(theirs), (planned.name, theirs)
        sub = dict(theirs)
        for name in SUBMITIT_OWNED:
            sub.pop(name, None)
        for name in ("output", "open-mode"):
            mine.pop(name, None)
        assert signal_lead_s(mine.pop("signal")) == signal_lead_s(sub.pop("signal")) \
            == planned.resources.signal_lead_s
        # the array: the same tasks and limit (submitit writes %tasks for "no limit", and
        # submits one task as a plain job)
        shown, _, limit = mine.pop("array").partition("%")
        assert shown == f"0-{planned.tasks - 1}"
        if planned.tasks > 1:
            their_shown, _, their_limit = sub.pop("array").partition("%")
            assert their_shown == shown
            assert int(their_limit) == min(planned.tasks, int(limit or planned.tasks))
        assert sub == mine, planned.name
        for line in ["module load gcc", *JOB_ENVIRONMENT]:
            assert line in rendered.splitlines() and line in submitted.splitlines(), line


def test_a_job_forgets_the_submitting_shells_launcher_variables() -> None:
    """sbatch exports the submitting shell's environment into the job; a torch launcher's
    variables there (RANK=0 WORLD_SIZE=1) would make every task train alone."""
    import subprocess

    from hargo_hpc.slurm.options import JOB_ENVIRONMENT
    from hargo_hpc.train.backend.distributed import STANDARD

    inherited = {name: "1" for name in STANDARD}
    script = "\n".join([*JOB_ENVIRONMENT, "env"])
    seen = subprocess.run(["bash", "-c", script], env={"PATH": "/usr/bin:/bin", **inherited},
                          capture_output=True, text=True, check=True).stdout
    names = {line.partition("=")[0] for line in seen.splitlines()}
    assert not names & set(STANDARD), sorted(names & set(STANDARD))
    assert "OMP_NUM_THREADS" in names
