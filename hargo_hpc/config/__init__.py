"""The experiment config: one TOML file in `jobs/`, `section.key=value` overrides, validation.

`experiment.py` composes the sections and reads, overrides, checks and writes the file; the
sections of the packages above the config live here too (`training.py`: `[model]`,
`[rollout]`, `[training]`, `[sft]`; `evaluation.py`: `[eval]`), and those of the packages
below it (algorithms, bench, tasks, sqd, handoff) in their own `settings`. No torch: a login
node only parses configs.
"""

from hargo_hpc.config.experiment import (
    ALGORITHM_NAMES,
    RESOLVED_NAME,
    AlgorithmSection,
    ConfigError,
    ExperimentConfig,
    JobResources,
    SweepPoint,
    TaskSpec,
    expand_sweep,
    generation_budget,
    load_config,
    parse_value,
    save_resolved,
    sweep_label,
    token_budgets,
    validate_config,
)

__all__ = ["ALGORITHM_NAMES", "RESOLVED_NAME", "AlgorithmSection", "ConfigError",
           "ExperimentConfig", "JobResources", "SweepPoint", "TaskSpec", "expand_sweep",
           "generation_budget", "load_config", "parse_value", "save_resolved", "sweep_label",
           "token_budgets", "validate_config"]
