"""The SFT corpus: every kernel is `ok` under the real bench at two shapes (one not square, with
its own check size), with the stage's other techniques forbidden; the techniques each kernel
declares are what the bench detects; the SFT pairs are the prompts and the fenced kernels."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hargo_hpc.bench import run_request
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.techniques import TECHNIQUES, detect_techniques
from hargo_hpc.tasks.corpus import CorpusKernel, declared_techniques, load_corpus, sft_examples
from hargo_hpc.tasks.gemm import Gemm

KERNELS = {kernel.name: kernel for kernel in load_corpus()}
# a square problem at the settings' size (64, checked at 37) and a rectangular one whose sizes
# are multiples of no tile or vector width, checked at 23
SHAPES = {
    "square": {"name": "dgemm-64", "M": 64, "N": 64, "K": 64},
    "rect": {"name": "dgemm-50x70x30", "M": 50, "N": 70, "K": 30, "check_size": 23},
}


@pytest.fixture(scope="module")
def bench_dirs() -> Iterator[tuple[Path, str]]:
    """A temp root the sandbox user can traverse (pytest's tmp dirs are 0700): the harness's
    per-run temp dirs go in it, and one compile cache for the module (the second shape of a
    kernel reuses its build)."""
    root = Path(tempfile.mkdtemp(prefix="hargo-corpus-tests-"))
    os.chmod(root, 0o755)
    runs = root / "runs"
    runs.mkdir()
    os.chmod(runs, 0o755)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(runs))
        yield runs, str(root / "cache")
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def settings() -> BenchSettings:
    """Small and quick, as the bench tests' settings: 2 timed pairs, short timeouts."""
    return BenchSettings(
        size=64, check_size=37, warmup=1, repetitions=2, timed_budget_ms=0,
        compile_timeout_s=8.0, run_timeout_s=3.0, request_timeout_s=30.0, memory_limit_mb=1024,
        reference_margin=100.0,  # at these sizes OpenBLAS's start-up dominates: no margin test
    )  # fmt: skip


def test_the_corpus_spans_the_techniques() -> None:
    assert len(KERNELS) >= 30
    combos = {kernel.techniques for kernel in KERNELS.values()}
    assert () in combos and tuple(TECHNIQUES) in combos
    for technique in TECHNIQUES:  # alone, and with others
        assert (technique,) in combos
        assert any(technique in c and len(c) > 1 for c in combos)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_declared_techniques_are_the_detected_ones(name: str) -> None:
    kernel = KERNELS[name]
    assert list(kernel.techniques) == detect_techniques(kernel.code)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_is_ok_under_the_bench(name: str, shape: str, settings: BenchSettings,
                                      bench_dirs: tuple[Path, str]) -> None:  # fmt: skip
    kernel = KERNELS[name]
    task = Gemm()
    example = task.from_record({k: v for k, v in SHAPES[shape].items() if k != "check_size"}, 0)
    forbidden = [t for t in TECHNIQUES if t not in kernel.techniques]
    request = {**task.request(example, kernel.completion, stage=1, forbidden=forbidden),
               "id": f"{name}-{shape}"}
    request["problem"]["check_size"] = SHAPES[shape].get("check_size", settings.check_size)
    record = run_request(request, settings, cache_dir=bench_dirs[1])
    assert record["status"] == "ok", (record["status"], record["reason"], record["output"][:600])
    size = SHAPES[shape]
    assert record["size"] == [size["M"], size["N"], size["K"]]
    assert record["check_size"] == [request["problem"]["check_size"]] * 3
    assert record["techniques"] == list(kernel.techniques)
    assert record["forbidden"] == forbidden
    reward = task.reward_from_record(record)
    assert reward is not None and reward > 0


def test_declared_techniques_refuse_a_bad_first_line() -> None:
    with pytest.raises(ValueError, match="k1: the first line"):
        declared_techniques("k1", "void gemm(void) {}\n")
    with pytest.raises(ValueError, match="k2: the first line"):
        declared_techniques("k2", "// plain. Techniques: none. */\n")
    with pytest.raises(ValueError, match="k3: unknown technique"):
        declared_techniques("k3", "/* x. Techniques: openmp, threads. */\n")
    # the declared order is TECHNIQUES' order whatever the line's
    assert declared_techniques("k4", "/* x. Techniques: unrolling, openmp. */\n") == (
        "openmp", "unrolling")


def test_sft_pairs_are_the_prompts_and_the_fenced_kernels() -> None:
    problems = Gemm.load_problems()
    kernels = [KERNELS["plain_ikj"], KERNELS["block_omp_tiles"]]
    pairs = sft_examples(problems[:2], kernels)
    # 2 problems x 2 kernels, problem by problem
    assert len(pairs) == 4
    task = Gemm()
    first, second = task.user_text(problems[0]), task.user_text(problems[1])
    assert [p for p, _ in pairs] == [first, first, second, second]
    assert [c for _, c in pairs] == [k.completion for k in kernels] * 2
    for (_, completion), kernel in zip(pairs, kernels * 2, strict=True):
        assert completion.startswith("```c\n/* ") and completion.endswith("}\n```")
        assert task.extract(completion) == kernel.code  # what the bench compiles
    assert len(sft_examples(problems)) == len(problems) * len(KERNELS)


def test_staged_sft_prompts_permit_the_kernels_techniques_and_forbid_the_rest() -> None:
    (problem,) = Gemm.load_problems()[:1]
    kernel = KERNELS["block_omp_tiles"]  # openmp, blocking
    ((prompt, completion),) = sft_examples([problem], [kernel], staged=True)
    assert completion == kernel.completion
    assert ("Permitted techniques: openmp (OpenMP threads), blocking (cache or register "
            "blocking).") in prompt
    assert ("Forbidden techniques: simd (SIMD: intrinsics, #pragma omp simd or vector types), "
            "unrolling (loop unrolling); code that uses them is rejected.") in prompt
    plain = CorpusKernel("p", KERNELS["plain_ijk"].code, ())
    ((prompt, _),) = sft_examples([problem], [plain], staged=True)
    assert "Permitted techniques: none." in prompt
    assert "Forbidden techniques: openmp (OpenMP threads), simd (" in prompt


def test_sft_under_sqd_stages_adds_each_kernel_under_every_stage_it_keeps() -> None:
    """Issue V.3: the warm start reads the prompts SQD asks. Each plain pair is followed by the
    same kernel under every stage whose rules it keeps, in the schedule's order, rendered as the
    RL step renders it; a kernel that keeps none (it uses every technique a stage forbids) has
    its plain pair only."""
    from hargo_hpc.bench.techniques import detect_techniques
    from hargo_hpc.sqd import SqdSettings
    from hargo_hpc.train.sft import sft_items

    stages = SqdSettings().stages  # open, no_simd, no_blocking
    problems = Gemm.load_problems()[:6]
    kernels = list(KERNELS.values())
    pairs = sft_examples(problems, kernels, stages=stages)
    task, used = Gemm(), {}
    plain_texts = {task.user_text(p) for p in problems}
    i = 0
    for problem in problems:
        for kernel in kernels:
            assert pairs[i] == (task.user_text(problem), kernel.completion)
            i += 1
            keeps = [s for s in stages[1:] if not set(kernel.techniques) & set(s.forbid)]
            for stage in keeps:
                text, completion = pairs[i]
                i += 1
                assert text == task.prompt_for(problem, stage.permitted, stage.forbid)
                assert completion == kernel.completion and text not in plain_texts
                assert not set(detect_techniques(kernel.code)) & set(stage.forbid)
                used[stage.name] = used.get(stage.name, 0) + 1
    assert i == len(pairs)
    assert set(used) == {"no_simd", "no_blocking"}, used  # every stage taught
    # through the trainer's reader: the same rows, the plain ones alone without stages
    rows = sft_items(task, problems[:1], stages)
    assert [(r.user_text, r.target) for r in rows] == sft_examples(problems[:1], stages=stages)
    assert len(sft_items(task, problems[:1])) == len(KERNELS)
