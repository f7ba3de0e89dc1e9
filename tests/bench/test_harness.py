"""End-to-end tests: reference kernels, the contract, the cache, the roof, the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from hargo_hpc.bench import BenchRequest, Problem, run_bench, run_request
from hargo_hpc.bench.calibrate import REFERENCE_KERNELS, kernel_source
from hargo_hpc.bench.commands import bench
from hargo_hpc.bench.roof import load_roof, roof_file

FIELDS = {
    "request_id", "status", "reward", "reason", "code_hash", "problem", "size", "check_size",
    "gflops", "times_s", "seed", "input_keys", "suspicious", "roof_gflops", "threads", "compiler",
    "compiler_version", "flags", "techniques", "forbidden", "stage", "cache_hit", "compile_s",
    "run_s", "elapsed_s", "output", "sandbox", "sandbox_unavailable", "harness_version",
}  # fmt: skip


@pytest.mark.parametrize("name", REFERENCE_KERNELS)
def test_reference_kernels_are_ok(name, settings, cache_dir, run_tmp) -> None:
    rec = run_request({"id": name, "completion": kernel_source(name)}, settings,
                      cache_dir=cache_dir)  # fmt: skip
    assert rec["status"] == "ok", (rec["reason"], rec["output"])
    g = rec["gflops"]
    assert 0 < g["min"] <= g["median"] <= g["max"] < 1000
    assert rec["reward"] == pytest.approx(100 * g["median"] / 1000.0)
    assert set(rec) == FIELDS
    json.dumps(rec)  # JSON-able
    assert list(run_tmp.iterdir()) == []


def test_record_fields_and_sandbox_layers(settings, cache_dir, run_tmp) -> None:
    rec = run_request(
        {"id": "r1", "completion": kernel_source("openmp"),
         "problem": {"name": "small", "M": 48, "N": 40, "K": 56}},
        settings, cache_dir=cache_dir,
    )  # fmt: skip
    assert rec["status"] == "ok" and rec["problem"] == "small" and rec["size"] == [48, 40, 56]
    assert rec["check_size"] == [37, 37, 37] and rec["techniques"] == ["openmp"]
    assert len(rec["code_hash"]) == 64 and rec["harness_version"]
    assert rec["compiler_version"].startswith("gcc")
    assert len(rec["times_s"]["all"]) == settings.repetitions
    # GFLOPS = 2 M N K / seconds / 1e9
    assert rec["gflops"]["median"] == pytest.approx(
        2 * 48 * 40 * 56 / rec["times_s"]["median"] / 1e9, rel=1e-3
    )
    assert rec["gflops"]["max"] == pytest.approx(2 * 48 * 40 * 56 / rec["times_s"]["min"] / 1e9,
                                                 rel=1e-3)  # fmt: skip
    for layer in ("tempdir", "pgroup", "env", "rlimits"):
        assert layer in rec["sandbox"]
    if os.geteuid() == 0:
        assert "uid:nobody" in rec["sandbox"] and "netns" in rec["sandbox"]
    assert "seccomp" in rec["sandbox"] or rec["sandbox_unavailable"]


def test_duplicate_completion_hits_the_cache(settings, tmp_path, run_tmp) -> None:
    cache = str(tmp_path / "fresh-cache")
    req = {"id": "a", "completion": kernel_source("reordered")}
    first = run_request(req, settings, cache_dir=cache)
    second = run_request({**req, "id": "b"}, settings, cache_dir=cache)
    assert not first["cache_hit"] and second["cache_hit"]
    assert first["status"] == second["status"] == "ok"
    assert second["compile_s"] < first["compile_s"]
    other_flags = settings.model_copy(update={"flags": ["-O2", "-fopenmp"]})
    assert not run_request(req, other_flags, cache_dir=cache)["cache_hit"]


def test_compile_errors_are_cached_too(settings, tmp_path, run_tmp) -> None:
    req = {"id": "x", "completion": "```c\nvoid gemm(int M, int N, int K, const double *A, "
           "const double *B, double *C) { oops }\n```"}
    cache = str(tmp_path / "c")
    assert run_request(req, settings, cache_dir=cache)["status"] == "compile_error"
    again = run_request(req, settings, cache_dir=cache)
    assert again["status"] == "compile_error" and again["cache_hit"]


def test_above_the_roof_is_suspicious_and_not_rewarded(settings, cache_dir, run_tmp) -> None:
    low_roof = settings.model_copy(update={"roof_gflops": 0.001})
    rec = run_request({"id": "s", "completion": kernel_source("openmp")}, low_roof,
                      cache_dir=cache_dir)  # fmt: skip
    assert rec["status"] == "ok" and rec["suspicious"] and rec["reward"] == 0.0


def test_infra_errors_are_not_scored(settings, cache_dir, run_tmp) -> None:
    broken = settings.model_copy(update={"compiler": "no-such-cc-hargo"})
    rec = run_request({"id": "i", "completion": kernel_source("naive")}, broken,
                      cache_dir=cache_dir)  # fmt: skip
    assert rec["status"] == "infra_error" and rec["reward"] is None
    bad = run_request({"id": "j", "completion": "x", "forbidden": ["warp-drive"]}, settings)
    assert bad["status"] == "infra_error" and bad["reward"] is None
    worse = run_request({"id": "k", "completion": "x", "problem": {"size": -3}}, settings)
    assert worse["status"] == "infra_error" and worse["request_id"] == "k"


def test_request_budget_bounds_the_whole_request(settings, cache_dir, run_tmp) -> None:
    tight = settings.model_copy(update={"request_timeout_s": 1.5, "run_timeout_s": 10.0})
    loop = ("```c\nvoid gemm(int M, int N, int K, const double *A, const double *B, double *C)"
            " { volatile int x = 1; while (x) {} }\n```")  # fmt: skip
    rec = run_request({"id": "t", "completion": loop}, tight, cache_dir=cache_dir)
    assert rec["status"] == "timeout" and rec["elapsed_s"] < 4


def test_without_root_layers_are_reported_missing(settings, cache_dir, run_tmp) -> None:
    nobody = settings.model_copy(update={"sandbox_user": "no-such-user-hargo"})
    rec = run_request({"id": "u", "completion": kernel_source("naive")}, nobody,
                      cache_dir=cache_dir)  # fmt: skip
    assert rec["status"] == "ok"
    assert any(u.startswith("uid") for u in rec["sandbox_unavailable"])


def test_dataclass_api(settings, cache_dir, run_tmp) -> None:
    req = BenchRequest(id="d", completion=kernel_source("blocked"), problem=Problem(M=33, N=70,
                       K=65, check=(19, 23, 29)))  # fmt: skip
    res = run_bench(req, settings, cache_dir=cache_dir)
    assert res.status == "ok" and res.size == [33, 70, 65] and "blocking" in res.techniques


def test_cli_run_file_stdin_and_json(tmp_path, cache_dir, run_tmp) -> None:
    src = tmp_path / "k.c"
    src.write_text(kernel_source("openmp"))
    runner = CliRunner()
    args = ["--size", "64", "--reps", "2", "--cache-dir", cache_dir]
    out = runner.invoke(bench, ["run", str(src), *args])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("ok ") and "GFLOPS" in out.output
    out = runner.invoke(bench, ["run", "-", *args, "--json"], input="no code here")
    rec = json.loads(out.output)
    assert rec["status"] == "format_violation" and rec["reward"] == -100
    out = runner.invoke(bench, ["run", str(tmp_path / "missing.c")])
    assert out.exit_code == 2


def test_cli_calibrate_prints_table_and_stores_roof(cache_dir, run_tmp) -> None:
    out = CliRunner().invoke(bench, ["calibrate", "--size", "96", "--reps", "3",
                                     "--cache-dir", cache_dir])  # fmt: skip
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].split()[:2] == ["kernel", "status"]
    for name in ("openblas", *REFERENCE_KERNELS):
        assert any(ln.startswith(name) and " ok " in ln for ln in lines), out.output
    assert "roof" in lines[-1] and str(roof_file()) in lines[-1]
    assert load_roof(len(os.sched_getaffinity(0)), "96") > 0


def test_no_calibration_inside_a_request(settings, cache_dir, run_tmp) -> None:
    """Without a known roof a request is rewarded raw GFLOPS; it never measures or stores one."""
    unknown = settings.model_copy(update={"roof_gflops": None, "size": 80})
    before = Path(roof_file()).read_bytes() if Path(roof_file()).exists() else None
    rec = run_request({"id": "a", "completion": kernel_source("naive")}, unknown,
                      cache_dir=cache_dir)  # fmt: skip
    assert rec["status"] == "ok" and rec["roof_gflops"] is None
    assert rec["reward"] == pytest.approx(rec["gflops"]["median"])
    after = Path(roof_file()).read_bytes() if Path(roof_file()).exists() else None
    assert after == before
