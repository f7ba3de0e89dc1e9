"""Evaluation: a model or run on the held-out split (`evaluate.py`), paired comparisons of
evaluations and runs, the SFT form check. Torch is imported only where a model answers; the
commands are `cli/eval.py`, the `[eval]` section `config/evaluation.py`."""
