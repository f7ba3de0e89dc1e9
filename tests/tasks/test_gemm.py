"""The GEMM task: problem files and their bad inputs, the prompt (contract, sizes, SQD stage),
extraction, the handoff request, the reward of a bench record and the metrics over records."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from hargo_hpc.bench.contract import BenchRequest
from hargo_hpc.bench.runner import Problem
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.status import STATUSES
from hargo_hpc.bench.techniques import TECHNIQUES
from hargo_hpc.bench.validate import SIGNATURE
from hargo_hpc.handoff.schema import Request
from hargo_hpc.tasks.base import DataError
from hargo_hpc.tasks.gemm import TECHNIQUE_TEXT, Gemm, sample_path
from hargo_hpc.tasks.registry import get_task

KERNEL = (
    "void gemm(int M, int N, int K, const double *A, const double *B, double *C) {\n"
    "    for (int i = 0; i < M * N; i++) C[i] = 0.0;\n"
    "}\n"
)


def write(tmp_path: Path, data: object, name: str = "problems.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_the_registry_gives_the_remote_gemm_task() -> None:
    task = get_task("gemm")
    assert isinstance(task, Gemm) and task.name == "gemm" and task.remote
    assert task.sample == "gemm_problems.json" and sample_path().is_file()


def test_the_sample_holds_the_papers_problem_and_other_shapes() -> None:
    examples = Gemm.load_problems()  # the shipped sample
    assert examples == Gemm.load_problems(sample_path())
    first = examples[0]
    assert first.task == "gemm" and first.id == "gemm:dgemm-256"
    assert first.meta["problem"] == {"name": "dgemm-256", "M": 256, "N": 256, "K": 256}
    assert first.output == "" and first.input == ""
    shapes = {(e.meta["problem"]["M"], e.meta["problem"]["N"], e.meta["problem"]["K"])
              for e in examples}  # fmt: skip
    assert {(128, 128, 128), (192, 256, 320), (384, 384, 384), (250, 250, 250)} <= shapes
    # the bench reads each problem as given, with the settings' check size
    for example in examples:
        p = Problem.from_dict(example.meta["problem"], BenchSettings())
        assert (p.name, p.M, p.N, p.K) == tuple(example.meta["problem"].values())
        assert p.check == (97, 97, 97)


def test_a_problem_file_is_read_in_order_with_descriptions(tmp_path: Path) -> None:
    path = write(tmp_path, [
        {"name": "a", "M": 3, "N": 5, "K": 7, "description": "odd"},
        {"name": "b.2_x-y", "M": 1, "N": 1, "K": 16384},
    ])  # fmt: skip
    a, b = Gemm.load_problems(path)
    assert (a.id, a.meta["description"], a.meta["problem"]) == (
        "gemm:a", "odd", {"name": "a", "M": 3, "N": 5, "K": 7})
    assert (b.id, b.meta["description"]) == ("gemm:b.2_x-y", "")
    assert Gemm().from_record({"name": "a", "M": 3, "N": 5, "K": 7, "description": "odd"}, 0) == a


@pytest.mark.parametrize(("data", "message"), [
    ("[{", "problems.json: not valid JSON: "),
    ({"name": "a"}, "problems.json: expected a non-empty JSON list of problems"),
    ([], "problems.json: expected a non-empty JSON list of problems"),
    ([{"name": "a", "M": 1, "N": 1, "K": 1}, 7], "problems.json: record 1: expected an object"),
    ([{"name": "a", "M": 1, "N": 1}], "problems.json: record 0: missing K"),
    ([{"name": "a", "M": 1, "N": 1, "K": 1, "size": 4}],
     "problems.json: record 0: unknown field(s) size (a problem has name, M, N, K, description)"),
    ([{"name": "a", "M": 0, "N": 1, "K": 1}],
     "problems.json: record 0: M must be an integer from 1 to 16384, got 0"),
    ([{"name": "a", "M": 1, "N": 1.5, "K": 1}],
     "problems.json: record 0: N must be an integer from 1 to 16384, got 1.5"),
    ([{"name": "a", "M": 1, "N": 1, "K": True}],
     "problems.json: record 0: K must be an integer from 1 to 16384, got True"),
    ([{"name": "a", "M": 1, "N": 1, "K": 16385}],
     "problems.json: record 0: K must be an integer from 1 to 16384, got 16385"),
    ([{"name": "a b", "M": 1, "N": 1, "K": 1}],
     "problems.json: record 0: name must be 1-64 of [A-Za-z0-9_.-], got 'a b'"),
    ([{"name": 5, "M": 1, "N": 1, "K": 1}], "record 0: name must be 1-64"),
    ([{"name": "a", "M": 1, "N": 1, "K": 1, "description": 3}],
     "problems.json: record 0: description must be a string, got 3"),
    ([{"name": "a", "M": 1, "N": 1, "K": 1}, {"name": "b", "M": 2, "N": 2, "K": 2},
      {"name": "a", "M": 3, "N": 3, "K": 3}],
     "problems.json: record 2: duplicate name 'a' (also record 0)"),
])  # fmt: skip
def test_bad_problem_files_are_one_line_errors(tmp_path: Path, data: object,
                                               message: str) -> None:  # fmt: skip
    path = write(tmp_path, data)
    with pytest.raises(DataError) as err:
        Gemm.load_problems(path)
    text = str(err.value)
    assert message in text and "\n" not in text
    assert text.startswith(str(path))


def test_unreadable_problem_files_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"missing\.json: cannot read: No such file"):
        Gemm.load_problems(tmp_path / "missing.json")
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(DataError, match=r"binary\.json: not valid JSON"):
        Gemm.load_problems(path)


def test_the_prompt_states_the_contract_and_the_sizes(tmp_path: Path) -> None:
    (example,) = Gemm.load_problems(write(tmp_path, [{"name": "r", "M": 192, "N": 256,
                                                      "K": 320}]))  # fmt: skip
    text = Gemm().user_text(example)
    assert text == example.instruction == Gemm().prompt_for(example)
    assert SIGNATURE in text  # the bench's own signature, verbatim
    assert "Problem r: M = 192, N = 256, K = 320." in text
    for phrase in ("row-major", "C = A * B", "double-precision", "Overwrite every element of C",
                   "No main, no BLAS", "any M, N, K >= 1", "<immintrin.h>", "```c code block"):
        assert phrase in text
    assert "Permitted" not in text and "Forbidden" not in text


def test_a_stage_is_asked_through_one_function_an_open_one_as_the_plain_prompt() -> None:
    from hargo_hpc.sqd import default_stages

    example, task = Gemm.load_problems()[0], Gemm()
    stages = {s.name: s for s in default_stages()}
    assert task.stage_text(example, None) == task.user_text(example)
    assert task.stage_text(example, stages["open"]) == task.user_text(example)
    no_simd = task.stage_text(example, stages["no_simd"])
    assert no_simd == task.prompt_for(example, stages["no_simd"].permitted, ["simd"])
    assert "Forbidden techniques: simd (" in no_simd and no_simd != task.user_text(example)


def test_the_prompt_states_an_sqd_stage() -> None:
    example = Gemm.load_problems()[0]
    text = Gemm().prompt_for(example, permitted=["omp", "tiling"], forbidden=["simd", "unroll"])
    # aliases are written as the bench's names, each with what it means
    assert ("Permitted techniques: openmp (OpenMP threads), blocking (cache or register "
            "blocking).\n") in text
    assert ("Forbidden techniques: simd (SIMD: intrinsics, #pragma omp simd or vector types), "
            "unrolling (loop unrolling); code that uses them is rejected.\n") in text
    assert text.endswith("Reply with the complete code in one ```c code block.")
    none = Gemm().prompt_for(example, permitted=[], forbidden=list(TECHNIQUES))
    assert "Permitted techniques: none.\n" in none
    assert "Forbidden techniques: openmp (OpenMP threads), simd (" in none
    only = Gemm().prompt_for(example, permitted=["simd"])
    assert "Permitted techniques: simd (" in only and "Forbidden" not in only
    assert set(TECHNIQUE_TEXT) == set(TECHNIQUES)
    with pytest.raises(ValueError, match="unknown technique 'magic'"):
        Gemm().prompt_for(example, forbidden=["magic"])
    with pytest.raises(ValueError, match="both permitted and forbidden: simd"):
        Gemm().prompt_for(example, permitted=["vectorization"], forbidden=["simd"])


def test_the_prompt_is_short() -> None:
    # the longest form (every technique named) stays far inside max_prompt_tokens = 512: about
    # 1000 characters, i.e. ~330 word pieces (all-MiniLM's tokenizer) or fewer BPE tokens
    example = Gemm.load_problems()[2]
    longest = Gemm().prompt_for(example, permitted=["openmp", "blocking"],
                                forbidden=["simd", "unrolling"])  # fmt: skip
    assert len(longest) < 1100


def test_extract_is_the_code_the_bench_compiles() -> None:
    task = Gemm()
    completion = f"Here it is:\n```c\n{KERNEL}```\nDone."
    assert task.extract(completion) == KERNEL
    two = f"```c\nvoid helper(void) {{}}\n```\nbetter:\n```c\n{KERNEL}```"
    assert task.extract(two) == KERNEL  # the last block that defines gemm
    assert task.extract(f"<think>```c\nint x;\n```</think>\n```c\n{KERNEL}```") == KERNEL
    for junk in ("", "   \n\t", "no code at all", "\x00\xff\ud800" * 1000, "```" * 2000):
        assert task.extract(junk) == ""
    assert task.extract("x" * 100_000 + "{;") == "x" * 100_000 + "{;\n"  # looks like C


def test_the_payload_is_the_bench_request_but_its_id() -> None:
    task = Gemm()
    example = Gemm.load_problems()[0]
    plain = task.request(example, "```c\n" + KERNEL + "```")
    assert plain == {"completion": "```c\n" + KERNEL + "```",
                     "problem": {"name": "dgemm-256", "M": 256, "N": 256, "K": 256}}
    request = {"id": "s3-p0-g1", "kind": "gemm", "payload": plain}
    assert Request.model_validate(request).model_dump() == request
    bench = BenchRequest.model_validate({**plain, "id": "s3-p0-g1"})  # what the bench reads
    assert (bench.id, bench.stage, bench.forbidden) == ("s3-p0-g1", None, None)
    staged = task.request(example, "", stage=2, forbidden=["omp", "tiling"])
    assert staged["stage"] == 2 and staged["forbidden"] == ["openmp", "blocking"]
    staged["problem"]["M"] = 1  # a copy: the example keeps its problem
    assert example.meta["problem"]["M"] == 256
    with pytest.raises(ValueError, match="unknown technique"):
        task.request(example, "", forbidden=["fortran"])


RECORDS = [  # what the bench returns (the fields metrics reads), for four examples
    {"request_id": "a", "status": "ok", "reward": 50.0, "gflops": {"median": 10.0},
     "ratio": 0.5, "techniques": ["openmp", "blocking"], "suspicious": False},
    {"request_id": "b", "status": "ok", "reward": 80.0, "gflops": {"median": 30.0},
     "ratio": 0.8, "techniques": ["openmp"], "suspicious": False},
    {"request_id": "c", "status": "compile_error", "reward": -40.0, "techniques": ["simd"]},
    {"request_id": "d", "status": "infra_error", "reward": None, "techniques": []},
]  # fmt: skip


def test_reward_from_record() -> None:
    task = Gemm()
    assert task.reward_from_record(RECORDS[0]) == 50.0
    assert task.reward_from_record(RECORDS[2]) == -40.0
    assert task.reward_from_record({"status": "format_violation", "reward": -100}) == -100.0
    assert task.reward_from_record({"status": "ok", "reward": 0.0, "suspicious": True}) == 0.0
    # not rewards: infra_error (as the handoff delivers it: scored false), or no number
    assert task.reward_from_record(RECORDS[3]) is None
    assert task.reward_from_record({"status": "infra_error", "reward": None,
                                    "scored": False}) is None  # fmt: skip
    assert task.reward_from_record({"status": "ok", "reward": 9.0, "scored": False}) is None
    for bad in (None, float("nan"), float("inf"), True, "50"):
        assert task.reward_from_record({"status": "ok", "reward": bad}) is None


def test_metrics_over_bench_records() -> None:
    examples = Gemm.load_problems()[:4]
    m = Gemm().metrics(examples, RECORDS)
    assert m["n"] == 4 and m["scored"] == 3  # the infra_error is not scored
    assert m["ok_share"] == pytest.approx(2 / 3)  # 2 ok of 3 scored
    assert m["compiled_share"] == pytest.approx(2 / 3)  # the compile_error did not
    assert m["gflops_mean"] == pytest.approx(20.0)  # (10 + 30) / 2
    assert m["gflops_max"] == 30.0
    assert m["ratio_mean"] == pytest.approx(0.65)  # (0.5 + 0.8) / 2
    assert m["ratio_max"] == 0.8
    # fast_p over the 3 scored: ratios 0.5 and 0.8 are >= 0.25 and >= 0.5, none >= 1
    assert (m["fast_0.25"], m["fast_0.5"], m["fast_1"]) == pytest.approx((2 / 3, 2 / 3, 0.0))
    assert m["log2_ratio_mean"] == pytest.approx((math.log2(0.5) + math.log2(0.8)) / 2)
    assert m["reward_mean"] == pytest.approx(30.0)  # (50 + 80 - 40) / 3
    assert m["suspicious"] == 0
    assert m["statuses"] == {**dict.fromkeys(STATUSES, 0), "ok": 2, "compile_error": 1,
                             "infra_error": 1}  # fmt: skip
    assert list(m["statuses"]) == list(STATUSES)
    assert m["techniques"] == {"openmp": 2, "simd": 1, "blocking": 1, "unrolling": 0}
    assert m["techniques_ok"] == {"openmp": 2, "simd": 0, "blocking": 1, "unrolling": 0}


def test_metrics_leave_suspicious_runs_out_of_the_speeds() -> None:
    examples = Gemm.load_problems()[:2]
    fake = {"request_id": "f", "status": "ok", "reward": 0.0, "gflops": {"median": 900.0},
            "ratio": 9.0, "techniques": [], "suspicious": True}  # fmt: skip
    m = Gemm().metrics(examples, [RECORDS[0], fake])
    assert m["ok_share"] == 1.0 and m["suspicious"] == 1
    assert (m["gflops_mean"], m["gflops_max"], m["ratio_mean"]) == (10.0, 10.0, 0.5)
    assert m["fast_1"] == 0.0 and m["fast_0.5"] == 0.5  # the 9x suspicious run is not fast
    assert m["reward_mean"] == pytest.approx(25.0)  # (50 + 0) / 2


def test_metrics_skip_fields_a_record_lacks() -> None:
    bare = {"request_id": "g", "status": "ok", "reward": 1.0, "gflops": None, "ratio": None,
            "techniques": "openmp"}  # fmt: skip
    m = Gemm().metrics(Gemm.load_problems()[:1], [bare])
    assert (m["ok_share"], m["gflops_mean"], m["ratio_mean"], m["reward_mean"]) == (
        1.0, None, None, 1.0)
    assert m["techniques"] == dict.fromkeys(TECHNIQUES, 0)  # not a list: nothing counted


def test_metrics_of_nothing_scored_and_bad_records() -> None:
    examples = Gemm.load_problems()[:1]
    m = Gemm().metrics(examples, [RECORDS[3]])
    assert (m["ok_share"], m["gflops_mean"], m["gflops_max"], m["ratio_mean"],
            m["reward_mean"]) == (None, None, None, None, None)  # fmt: skip
    with pytest.raises(DataError, match="1 records for 2 examples"):
        Gemm().metrics(Gemm.load_problems()[:2], [RECORDS[0]])
    with pytest.raises(DataError, match="record 0: expected a bench record with a status"):
        Gemm().metrics(examples, ["```c\nvoid gemm() {}```"])
    with pytest.raises(DataError, match=r"record 0: .* got 'great'"):
        Gemm().metrics(examples, [{"status": "great"}])


def test_metrics_under_a_stage_count_forbidden_use_and_on_stage_kernels() -> None:
    """Issue V: records whose request forbade techniques add forbidden_share (the scored
    kernels using one, whatever their status) and on_stage_share (ok, not suspicious, not off
    their stage); plain records add neither."""
    task = Gemm()
    examples = Gemm.load_problems()[:1] * 5

    def rec(status: str, techniques: list[str], **extra: Any) -> dict[str, Any]:
        return {"status": status, "reward": 1.0, "techniques": techniques,
                "forbidden": ["openmp"], "gflops": {"median": 5.0}, "ratio": 0.2, **extra}

    records = [rec("ok", ["openmp"], off_stage=["openmp"], reward=-5.0),  # used, off stage
               rec("ok", ["blocking"]),  # on stage
               rec("compile_error", ["openmp"], reward=-40.0),  # used, failed
               rec("ok", [], suspicious=True, reward=0.0),  # not on stage: suspicious
               {"status": "infra_error", "forbidden": ["openmp"]}]  # not scored
    got = task.metrics(examples, records)
    assert got["scored"] == 4
    assert got["forbidden_share"] == pytest.approx(2 / 4)
    assert got["on_stage_share"] == pytest.approx(1 / 4)
    plain = task.metrics(examples[:1], [{**records[1], "forbidden": []}])
    assert "forbidden_share" not in plain and "on_stage_share" not in plain
