"""The example's reward function, written as for TRL: one value per completion, None where it
does not apply (a question without a numeric answer is not scored)."""

from __future__ import annotations

import re

NUMBER = re.compile(r"-?\d+")


def exact(prompts: list[str], completions: list[str], references: list[str],
          **kwargs: object) -> list[float | None]:
    """1.0 when the completion's first integer is the reference, 0.0 when it is another or
    none, None when the reference is not an integer."""
    del prompts, kwargs
    values: list[float | None] = []
    for completion, reference in zip(completions, references, strict=True):
        if not NUMBER.fullmatch(reference.strip()):
            values.append(None)
            continue
        found = NUMBER.search(completion)
        values.append(float(found is not None and found.group() == reference.strip()))
    return values
