"""The second red-team review's attacks (after the judge and the compile isolation), each a test:
sources in data/review2/. None may end `ok` with a reward it did not earn, `infra_error`
(unscored) or leak a file into the record."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hargo_hpc.bench import run_request

from .procs import sandbox_processes
from .test_judge import judged, unchecked_binary

DATA = Path(__file__).parent / "data" / "review2"
LICENSE = "/usr/share/common-licenses/GPL-3"


def run(code: str, settings, cache_dir: str) -> dict:
    return run_request({"id": "r2", "completion": "```c\n" + code + "```\n"}, settings,
                       cache_dir=cache_dir)  # fmt: skip


# A1: a section .interp made the static link ask for a loader; the failed exec was infra_error
def test_a_named_interpreter_is_refused(settings, cache_dir, run_tmp) -> None:
    rec = run((DATA / "interp.c").read_text(), settings, cache_dir)
    assert rec["status"] == "format_violation" and ".interp" in rec["reason"], rec["reason"]


def test_a_failed_exec_is_the_kernels_when_a_known_good_one_runs(settings, cache_dir, tmp_path,
                                                                 run_tmp) -> None:  # fmt: skip
    # past the object checks (built by the test): the exec fails (ENOENT: no such loader); the
    # naive kernel built and judged the same way runs, so the failure is the kernel's
    from hargo_hpc.bench import runner

    binary = unchecked_binary((DATA / "interp.c").read_text(), tmp_path, settings, cache_dir)
    res = judged(binary, settings, cache_dir)[0].verdict
    assert res.status == runner.EXEC_FAILED and "No such file" in res.reason, res.reason
    rec = runner._exec_probe(runner.harness(runner.CompileCache(cache_dir), "gcc").judge,
                             runner.reference(settings, runner.CompileCache(cache_dir), 60),
                             settings, runner.CompileCache(cache_dir), None,
                             time.monotonic() + 60)  # fmt: skip
    assert rec == ""  # the probe ran: a failed exec is then the completion's runtime_error


# A2: #line (or a line marker) naming another file made gcc quote that file's line
@pytest.mark.parametrize("directive", [f'#line 1 "{LICENSE}"', f'# 1 "{LICENSE}"',
                                       f'%:line 1 "{LICENSE}"', '#line 3 "/etc/hostname"'],
                         ids=["line", "marker", "digraph", "hostname"])
def test_line_directives_are_refused(directive, settings, cache_dir, run_tmp) -> None:
    code = directive + "\nvoid gemm(int M, int N, int K, const double *A, const double *B, " \
        "double *C) { x; }\n"
    rec = run(code, settings, cache_dir)
    assert rec["status"] == "format_violation" and "#line" in rec["reason"], rec["reason"]
    assert "GNU GENERAL PUBLIC LICENSE" not in rec["output"]
    assert Path("/etc/hostname").read_text().strip() not in rec["output"] + rec["reason"]


# A3: ~240 sleeping threads, then a helper that finished C after the judge read its clock
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 inline assembly")
def test_a_late_helper_thread_cannot_work_outside_the_window(settings, cache_dir,
                                                             run_tmp) -> None:  # fmt: skip
    quick = settings.model_copy(update={"run_timeout_s": 4.0, "size": 128})
    rec = run((DATA / "late_helper.c").read_text(), quick, cache_dir)
    # RLIMIT_NPROC = threads + 8 for its uid: the dummies and the helper cannot all be made;
    # without its helper the kernel never finishes its call
    assert rec["status"] in ("timeout", "wrong_result", "runtime_error"), (rec["status"],
                                                                           rec["reason"])
    assert sandbox_processes() == []
