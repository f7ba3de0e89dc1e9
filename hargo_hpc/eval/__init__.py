"""Evaluation: `hargo eval` of a model or run on the held-out split (`evaluate.py`), scoring
and WinRate of prediction files (`commands.py`), the `[eval]` settings (`settings.py`). Torch
is imported only where a model answers."""
