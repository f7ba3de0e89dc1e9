"""Staged Quality-Diversity (SQD) for GEMM code: the package that owns it.

- `schedule`: the stages, the advancement rule, the per-problem state and the archive (pure:
  SQD decides, it never runs code; its module docstring has the rules); its settings
  (`SqdSettings`, the `[sqd]` section `hargo_hpc.config` composes).
- `report`: what a run's SQD did, as text and a PNG (`hargo sqd report`).

The trainer's use of it (which prompts are staged, the required-technique penalty) is
`hargo_hpc.train.sqd_run`, its commands `cli/sqd.py`. The names of `schedule` are re-exported here.
"""

from hargo_hpc.sqd.schedule import (
    BACKUP,
    FORMAT,
    RESULTS,
    STATE,
    ArchiveEntry,
    ProblemState,
    Result,
    Sqd,
    SqdError,
    SqdSettings,
    StageSpec,
    archive_key,
    default_stages,
    load_state_file,
    step_problem,
)

__all__ = ["BACKUP", "FORMAT", "RESULTS", "STATE", "ArchiveEntry", "ProblemState", "Result",
           "Sqd", "SqdError", "SqdSettings", "StageSpec", "archive_key", "default_stages",
           "load_state_file", "step_problem"]
