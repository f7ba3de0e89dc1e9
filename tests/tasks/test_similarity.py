"""The embedding similarity: the real packaged model, offline, loaded once, never writing ~."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hargo_hpc.tasks.base import DataError
from hargo_hpc.tasks.similarity import load_model, model_path, similarity_scores

REFERENCE = ("The BigCloneBench dataset is designed for evaluating clone detection techniques, "
             "specifically focusing on code clones in Java.")
PARAPHRASE = "BigCloneBench is a benchmark for judging how well tools detect cloned Java code."
UNRELATED = "The weather in Paris was sunny and warm last weekend."


@pytest.fixture(scope="session")
def embedding_model() -> Any:
    """The packaged model, loaded once per process (load_model caches by path)."""
    return load_model(str(model_path()))


def test_a_paraphrase_scores_above_an_unrelated_sentence(embedding_model: Any) -> None:
    para, unrelated, same = similarity_scores([PARAPHRASE, UNRELATED, REFERENCE], [REFERENCE] * 3)
    # measured: 0.89, 0.0 (a negative cosine, clamped), 1.0
    assert para > 0.7 and unrelated < 0.3 and para - unrelated > 0.4
    assert same == pytest.approx(1.0, abs=1e-5)
    assert load_model(str(model_path())) is embedding_model  # one load per process and path
    assert embedding_model.device.type == "cpu"


def test_loading_writes_nothing_into_home_or_the_caches(embedding_model: Any) -> None:
    similarity_scores([PARAPHRASE], [REFERENCE])
    home, cache = Path(os.environ["HOME"]), Path(os.environ["XDG_CACHE_HOME"])
    assert not (home / ".cache").exists()
    assert not [p for p in cache.iterdir() if p.name in ("huggingface", "torch",
                                                           "sentence_transformers")]


def test_any_text_scores_in_0_1_and_empty_scores_0(embedding_model: Any) -> None:
    binary = bytes(range(256)).decode("latin-1")
    texts = ["", "   \n", "x" * 100_000, "\udc80\x00 junk \ufffe", binary]
    scores = similarity_scores(texts, [REFERENCE] * len(texts))
    assert scores[:2] == [0.0, 0.0]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert similarity_scores(["a"], [""]) == [0.0]  # an empty reference too


def test_nothing_to_embed_loads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: str) -> Any:
        raise AssertionError("loaded a model for empty texts")

    monkeypatch.setattr("hargo_hpc.tasks.similarity.load_model", refuse)
    assert similarity_scores(["", " "], ["", "\t"]) == [0.0, 0.0]
    assert similarity_scores([], []) == []


def test_a_model_directory_setting(embedding_model: Any, tmp_path: Path) -> None:
    packaged = str(model_path())
    assert similarity_scores([PARAPHRASE], [REFERENCE], packaged) == (
        similarity_scores([PARAPHRASE], [REFERENCE]))
    with pytest.raises(DataError, match="is not a directory"):
        similarity_scores(["a"], ["b"], str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="2 answers but 1 references"):
        similarity_scores(["a", "b"], ["c"])


def test_the_same_call_again_embeds_nothing(embedding_model: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's metrics score what its reward just scored: the second identical call returns
    the first's scores without the encoder; a different call embeds again."""
    first = similarity_scores([PARAPHRASE, UNRELATED], [REFERENCE] * 2)
    calls: list[int] = []
    real = embedding_model.encode

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(embedding_model, "encode", counting)
    again = similarity_scores([PARAPHRASE, UNRELATED], [REFERENCE] * 2)
    assert again == first and calls == []
    again[0] = -1.0  # the caller's list is its own
    assert similarity_scores([PARAPHRASE, UNRELATED], [REFERENCE] * 2) == first
    other = similarity_scores([UNRELATED, PARAPHRASE], [REFERENCE] * 2)
    assert calls == [1] and other == pytest.approx(first[::-1], abs=1e-6)
