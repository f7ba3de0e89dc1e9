"""The security review's reward hacks (sources in data/review/, written by our own review), each
against the two-process driver and the hardened checks.  No attack may end `ok` with inflated
GFLOPS, `infra_error` (unscored) or leak a file's content into `output`."""

from __future__ import annotations

from pathlib import Path

import pytest

from hargo_hpc.bench import build as build_mod
from hargo_hpc.bench import run_request
from hargo_hpc.bench.calibrate import kernel_source
from hargo_hpc.bench.sandbox import Outcome
from hargo_hpc.bench.settings import BenchSettings

DATA = Path(__file__).parent / "data" / "review"
PASSWD = Path("/etc/passwd").read_text().splitlines()[0]  # "root:x:0:0:..."


def source(name: str) -> str:
    return "```c\n" + (DATA / name).read_text() + "```\n"


def run(name: str, settings: BenchSettings, cache_dir: str, **extra) -> dict:
    return run_request({"id": name, "completion": source(name), **extra}, settings,
                       cache_dir=cache_dir)  # fmt: skip


@pytest.fixture(scope="module")
def honest_gflops(scratch_root: Path) -> float:
    """GFLOPS of the honest i-k-j kernel (what h_precompute and m_got really compute)."""
    settings = BenchSettings(size=64, check_size=37, warmup=1, repetitions=2)
    rec = run_request({"id": "honest", "completion": kernel_source("reordered")}, settings,
                      cache_dir=str(scratch_root / "cache"))  # fmt: skip
    assert rec["status"] == "ok", rec["reason"]
    return rec["gflops"]["max"]


# 1: forged verdicts on fd 3 (write, lseek+write), NaN / tiny / missing times
@pytest.mark.parametrize("name", ["a_fd3.c", "b_nan.c", "c_idx.c", "e_lseek.c", "f_inf.c"])
def test_forged_verdict_is_a_penalty(name, settings, cache_dir, run_tmp) -> None:
    rec = run(name, settings, cache_dir)
    assert rec["status"] in ("runtime_error", "wrong_result"), (rec["status"], rec["reason"])
    assert rec["reward"] == getattr(settings.penalties, rec["status"])


# 2: GOT overwrite of clock_gettime: the clock is in the other process (and RELRO'd)
def test_got_hijack_cannot_fake_the_clock(settings, cache_dir, run_tmp, honest_gflops) -> None:
    rec = run("m_got.c", settings, cache_dir)
    assert rec["status"] != "infra_error", rec["reason"]
    if rec["status"] == "ok":
        assert rec["gflops"]["median"] < 3 * honest_gflops, rec["gflops"]


# 3, 4: predicting the Freivalds vectors / precomputing future inputs from the seed
@pytest.mark.parametrize("name", ["g_freivalds.c", "g2_freivalds_throttled.c"])
def test_predicted_freivalds_vectors_fail(name, settings, cache_dir, run_tmp) -> None:
    # the seed they look for in argv is no longer there (the judge's argv is another process's,
    # keys come from getrandom through ChaCha12): they crash searching for it, or compute junk
    rec = run(name, settings, cache_dir)
    assert rec["status"] in ("wrong_result", "runtime_error"), (rec["status"], rec["reason"])


def test_precomputed_inputs_gain_nothing(settings, cache_dir, run_tmp, honest_gflops) -> None:
    rec = run("h_precompute.c", settings, cache_dir)
    assert rec["status"] in ("ok", "wrong_result", "runtime_error"), (rec["status"], rec["reason"])
    if rec["status"] == "ok":
        assert rec["gflops"]["median"] < 3 * honest_gflops, rec["gflops"]
    assert rec["seed"] == 0 and len(rec.get("input_keys") or ["x"] * 4) == 4  # 1 + 2 + 1 calls


# 5: includes and .incbin that read files at compile time
@pytest.mark.parametrize(
    "name",
    ["i_digraph.c", "j_splice.c", "k_forbidden_hdr.c", "l_incbin.c", "q_macro_incbin.c",
     "r_concat_incbin.c", "v_trigraph.c"],
)  # fmt: skip
def test_compile_time_file_reads_are_violations(name, settings, cache_dir, run_tmp) -> None:
    rec = run(name, settings, cache_dir)
    assert rec["status"] == "format_violation", (rec["status"], rec["reason"], rec["output"])
    assert PASSWD not in rec["output"] and "root:" not in rec["output"]
    assert Path("/etc/hostname").read_text().strip() not in rec["output"] + rec["reason"]


# 6: OpenMP hidden from the source detector
@pytest.mark.parametrize("name", ["o_digraph_pragma.c", "s_pragma_stringize.c"])
def test_hidden_openmp_is_forbidden(name, settings, cache_dir, run_tmp) -> None:
    rec = run(name, settings, cache_dir, forbidden=["openmp"])  # judged, then off its stage
    assert rec["status"] == "ok" and rec["off_stage"] == ["openmp"], rec["reason"]
    assert rec["reward"] == settings.penalties.off_stage and "openmp" in rec["reason"]
    before = settings.model_copy(update={"stage_rules": "before"})  # the ablation: refused
    rec = run(name, before, cache_dir, forbidden=["openmp"])
    assert rec["status"] == "format_violation" and "openmp" in rec["reason"], rec["reason"]
    allowed = run(name, settings, cache_dir)  # allowed when not forbidden
    assert allowed["status"] == "ok" and allowed["off_stage"] == [] and allowed["reward"] >= 0


def test_constructor_table_by_another_name(settings, cache_dir, run_tmp) -> None:
    rec = run("p_initarray_type.c", settings, cache_dir)
    assert rec["status"] == "format_violation", (rec["status"], rec["reason"])


# 7: unknown (real-time) signal; attacks on the parent process
@pytest.mark.parametrize("name", ["d_rt.c", "t_kill_parent.c", "u_tgkill_parent.c"])
def test_signals_are_runtime_errors(name, settings, cache_dir, run_tmp) -> None:
    rec = run(name, settings, cache_dir)
    assert rec["status"] == "runtime_error", (rec["status"], rec["reason"])


def test_realtime_signal_is_named(settings, cache_dir, run_tmp) -> None:
    rec = run("d_rt.c", settings, cache_dir)
    assert "SIGRTMIN" in rec["reason"] or "signal" in rec["reason"]


# 8: text that cannot be encoded
def test_lone_surrogate_is_a_format_violation(settings, cache_dir, run_tmp) -> None:
    code = kernel_source("naive").replace("{", "{ /* \ud800 */", 1)
    rec = run_request({"id": "s", "completion": code}, settings, cache_dir=cache_dir)
    assert rec["status"] == "format_violation", (rec["status"], rec["reason"])


# compile_error caching: only deterministic compiler diagnostics are cached
@pytest.mark.parametrize(
    ("output", "status", "cached"),
    [
        ("kernel.c:1:1: error: expected ';'", "compile_error", True),
        ("as: kernel.o: No space left on device", "infra_error", False),
        ("gcc: fatal error: cannot execute 'as': No such file", "infra_error", False),
        ("gcc: fatal error: Killed signal terminated program cc1", "compile_error", False),
        ("cc1: out of memory allocating 65536 bytes", "compile_error", False),
    ],
)
def test_compile_error_cache_policy(output, status, cached, settings, tmp_path, run_tmp,
                                    monkeypatch) -> None:  # fmt: skip
    def fake(*_a, **_k) -> Outcome:
        return Outcome(returncode=1, signal=None, timed_out=False, wall_s=0.01, output=output,
                       output_bytes=len(output))  # fmt: skip

    monkeypatch.setattr(build_mod, "run_sandboxed", fake)
    monkeypatch.setattr(build_mod, "_PROBES", {})  # a suspicion is confirmed by a probe compile
    cache = str(tmp_path / "c")
    rec = run_request({"id": "x", "completion": kernel_source("naive")}, settings,
                      cache_dir=cache)  # fmt: skip
    assert rec["status"] == status, rec["reason"]
    again = run_request({"id": "x", "completion": kernel_source("naive")}, settings,
                        cache_dir=cache)  # fmt: skip
    assert again["cache_hit"] is cached
