"""The experiment config: shipped jobs, overrides, one-line errors, the resolved file."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from hargo_hpc.config import (
    ConfigError,
    ExperimentConfig,
    expand_sweep,
    load_config,
    parse_value,
    save_resolved,
    validate_config,
)

REPO = Path(__file__).resolve().parents[1]
JOBS = sorted((REPO / "jobs").glob("*.toml"))


def write(tmp_path: Path, text: str, name: str = "job.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_jobs_are_shipped() -> None:
    names = {p.stem for p in JOBS}
    assert {"demo", "hpcgpt_mix", "gemm_sqd", "sweep"} <= names


@pytest.mark.parametrize("job", JOBS, ids=lambda p: p.stem)
def test_every_shipped_job_validates(job: Path) -> None:
    cfg = load_config(job)
    assert cfg.run.name


def test_empty_file_gives_all_defaults(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, ""))
    assert cfg.algorithm.name == "grpo"
    assert cfg.training.lr == 1e-6
    assert cfg.bench.penalties.compile_error == -40
    assert cfg.slurm.train.partition == "gpu" and cfg.slurm.train.gpus_per_node == 1
    assert cfg.run_dir() == Path("runs/experiment")
    assert cfg.handoff_dir() == Path("runs/experiment/handoff")
    shared = load_config(write(tmp_path, ""), ["handoff.dir=/scratch/x/handoff", "run.name=b"])
    assert shared.handoff_dir() == Path("/scratch/x/handoff")
    assert [s.name for s in cfg.sqd.stages] == ["open", "no_simd", "no_blocking"]
    with pytest.raises(ConfigError, match=r"sqd.stages.0: .*unknown technique 'magic'"):
        load_config(write(tmp_path, ""), ["sqd.stages=[{name='x', forbid=['simd', 'magic']}]"])


def test_overrides_are_typed_and_applied(tmp_path: Path) -> None:
    job = write(tmp_path, '[training]\nlr = 1e-4\n[[data.tasks]]\nname = "plp_qa"\n')
    cfg = load_config(
        job,
        [
            "training.lr=1e-6",
            "training.zero_stage=3",
            "model.path=/models/x y",
            "data.tasks.0.weight=2.5",
            "slurm.bench.extra=['--exclusive']",
            "algorithm.hargo.confidence=false",
            "bench.penalties.timeout=-31",
        ],
    )
    assert cfg.training.lr == 1e-6
    assert cfg.training.zero_stage == 3
    assert cfg.model.path == "/models/x y"
    assert cfg.data.tasks[0].weight == 2.5
    assert cfg.slurm.bench.extra == ["--exclusive"]
    assert cfg.algorithm.hargo.confidence is False
    assert cfg.bench.penalties.timeout == -31


def test_parse_value() -> None:
    assert parse_value("1e-6") == 1e-6
    assert parse_value("true") is True
    assert parse_value("[1, 2]") == [1, 2]
    assert parse_value("gpu") == "gpu"
    assert parse_value('"07"') == "07"


@pytest.mark.parametrize(
    ("text", "overrides", "expected"),
    [
        ("[training]\nlrr = 1\n", [], "unknown key 'training.lrr' (allowed: lr, steps"),
        ("[trainng]\n", [], "unknown key 'trainng' (allowed: run, model"),
        ("[training]\nlr = 'fast'\n", [], "training.lr: bad value 'fast'"),
        ("[training]\nzero_stage = 4\n", [], "training.zero_stage: bad value 4"),
        ("[algorithm]\nname = 'ppo'\n", [], "algorithm.name: bad value 'ppo': Input should be"),
        ("[[data.tasks]]\nweight = 1\n", [], "data.tasks.0.name: missing (required)"),
        ("[data]\ntasks = []\n", [], "job.toml: data: at least one task is required"),
        ("[slurm.bench]\ntime = '1 hour'\n", [], "slurm.bench.time: bad value '1 hour'"),
        ("", ["training.lrr=1"], "override training.lrr: unknown key 'lrr' in training"),
        ("[training]\nsft_steps = 3\n", [], "'training.sft_steps' is now 'sft.steps'"),
        ("", ["training.sft_steps=3"], "'training.sft_steps' is now 'sft.steps'"),
        ("", ["nosection.x=1"], "override nosection.x: unknown key 'nosection' in top level"),
        ("", ["training.lr"], "override 'training.lr' is not of the form section.key=value"),
        ("", ["training.lr=-1"], "training.lr: bad value -1: Input should be greater than 0"),
        (
            "[[data.tasks]]\nname = 'plp_qa'\n",
            ["data.tasks.5.weight=1"],
            "'5' is not an index of data.tasks (1 item(s) in the file)",
        ),
        ("", ["data.tasks.0.weight=1"], "data.tasks is not set in the file"),
        ("", ["training.lr.x=1"], "override training.lr.x: training.lr has no sub-keys"),
        ("", ["algorithm.hargo.beta=1"], "unknown key 'beta' in algorithm.hargo (allowed: disc"),
        ("", ["algorithm.hargo.max_weight=0.5"], "algorithm.hargo.max_weight: bad value 0.5"),
        ("", ["model.reference_device=sharded"],
         "model.reference_device 'sharded' needs training.zero_stage 3"),
        ("", ["training.precision=bf16"],
         "job.toml: training.precision bf16 needs model.dtype 'bfloat16', not 'float32' ("),
    ],
)
def test_errors_are_one_line_naming_file_field_value(
    tmp_path: Path, text: str, overrides: list[str], expected: str
) -> None:
    job = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(job, overrides)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(job))
    assert expected in message


def test_malformed_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"malformed TOML: .*line 1"):
        load_config(write(tmp_path, "[training\nlr = 1"))
    with pytest.raises(ConfigError, match="no such experiment file"):
        load_config(tmp_path / "absent.toml")


def test_resolved_config_round_trips_exactly(tmp_path: Path) -> None:
    job = REPO / "jobs" / "demo.toml"
    overrides = ["training.lr=3e-6", "algorithm.clip_high=0.28", f"run.dir={tmp_path}"]
    cfg = load_config(job, overrides)
    path = save_resolved(cfg)
    assert path == tmp_path / "demo" / "config.toml"
    again = load_config(path)
    assert again == cfg
    assert tomllib.loads(path.read_text())["training"]["lr"] == 3e-6
    assert [p.name for p in path.parent.iterdir()] == ["config.toml"]  # no temporary left


def test_validate_config_from_data() -> None:
    cfg = validate_config({"rollout": {"num_generations": 8}})
    assert isinstance(cfg, ExperimentConfig) and cfg.rollout.num_generations == 8
    with pytest.raises(ConfigError, match=r"<config>: rollout.num_generations: bad value 0"):
        validate_config({"rollout": {"num_generations": 0}})


def test_hargo_section_is_the_algorithm_params() -> None:
    """The config composes the algorithms' HargoParams (declared once) as algorithm.hargo."""
    from hargo_hpc.algorithms.hargo_params import HargoParams
    from hargo_hpc.algorithms.presets import resolve_algorithm
    from hargo_hpc.config import AlgorithmSection

    assert AlgorithmSection.model_fields["hargo"].annotation is HargoParams
    assert validate_config({}).algorithm.hargo == HargoParams()
    cfg = validate_config({"algorithm": {"name": "hargo", "hargo": {"confidence": False}}})
    resolved = resolve_algorithm(cfg.algorithm)
    assert resolved.hargo == HargoParams(confidence=False)


def test_a_time_limit_override_stays_a_string() -> None:
    # TOML reads 00:10:00 as a time of day; a Slurm limit is meant
    assert parse_value("00:10:00") == "00:10:00" and parse_value("1979-05-27") == "1979-05-27"
    assert parse_value("3") == 3 and parse_value('"00:10:00"') == "00:10:00"


def test_setting_one_key_of_a_job_kind_keeps_the_kinds_other_defaults() -> None:
    # [slurm.train] with only a time limit is still a GPU job, not JobResources' CPU default
    config = validate_config({"slurm": {"train": {"time": "00:10:00"},
                                        "eval": {"partition": "cpu", "gpus_per_node": 0}}})
    train = config.slurm.train
    assert (train.partition, train.gpus_per_node, train.cpus_per_task, train.time) == (
        "gpu", 1, 2, "00:10:00")
    assert (config.slurm.eval.partition, config.slurm.eval.gpus_per_node) == ("cpu", 0)


def test_a_sweep_expands_to_every_combination_in_the_written_order() -> None:
    config = validate_config({"run": {"name": "m"}, "sweep": {
        "algorithm.name": ["grpo", "dapo"], "run.seed": [0, 1], "training.lr": [1e-5]}})
    points = expand_sweep(config)
    assert [point.label for point in points] == [
        "name-grpo_seed-0_lr-1e.05", "name-grpo_seed-1_lr-1e.05",
        "name-dapo_seed-0_lr-1e.05", "name-dapo_seed-1_lr-1e.05"]
    assert [(p.algorithm.name, p.run.seed, p.training.lr) for _, p, _ in points] == [
        ("grpo", 0, 1e-5), ("grpo", 1, 1e-5), ("dapo", 0, 1e-5), ("dapo", 1, 1e-5)]
    assert all(p.sweep == {} and p.run.name == "m" for _, p, _ in points)
    assert points[1].values == {"algorithm.name": "grpo", "run.seed": 1, "training.lr": 1e-5}
    assert expand_sweep(validate_config({})) == [("", validate_config({}), {})]
    with pytest.raises(ConfigError, match="same label"):
        expand_sweep(validate_config({"sweep": {"training.lr": ["0.5", 0.5]}}))
