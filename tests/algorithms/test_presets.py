"""Method presets and their overrides from the config's AlgorithmSection."""

from __future__ import annotations

import tomllib
from types import SimpleNamespace

import pytest

from hargo_hpc.algorithms import ESTIMATORS, PRESETS, HargoParams, resolve_algorithm
from hargo_hpc.algorithms.presets import HARGO_PRESETS, hargo_overrides
from hargo_hpc.config import ALGORITHM_NAMES, AlgorithmSection, ConfigError, validate_config


def test_every_config_name_has_a_preset() -> None:
    assert set(PRESETS) == set(ALGORITHM_NAMES)
    for name in ALGORITHM_NAMES:
        resolved = resolve_algorithm(AlgorithmSection(name=name))
        assert resolved.name == name
        assert resolved.estimator is None or resolved.estimator in ESTIMATORS


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("grpo", {"estimator": "grpo", "agg": "seq-mean-token-mean", "kl_coef": 0.04,
                  "kl_estimator": "k3", "clip_high": 0.2}),
        ("dr_grpo", {"estimator": "dr_grpo", "agg": "seq-mean-token-sum-norm", "kl_coef": 0.0}),
        ("dapo", {"agg": "token-mean", "clip_low": 0.2, "clip_high": 0.28, "kl_coef": 0.0,
                  "dynamic_sampling": True, "overlong_buffer": None}),
        ("rloo", {"estimator": "rloo", "kl_in_reward": True, "kl_estimator": "k1"}),
        ("reinforce_pp", {"estimator": "reinforce_pp", "kl_in_reward": True}),
        ("gspo", {"ratio_level": "sequence", "clip_low": 3e-4, "clip_high": 4e-4}),
        ("gpg", {"loss": "pg", "estimator": "gpg", "kl_coef": 0.0}),
        ("dpo", {"loss": "dpo", "estimator": None}),
        ("sft", {"loss": "sft", "estimator": None}),
        ("hargo", {"estimator": "grpo", "kl_coef": 0.04, "hargo": HargoParams()}),
        ("hargo_std_batch", {"estimator": "grpo", "kl_coef": 0.04, "hargo": HargoParams(
            discrimination_stat="std_batch", confidence_stat="token_mean",
            confidence_scale=1.0)}),
        ("hargo_no_discrimination", {"kl_coef": 0.04,
                                     "hargo": HargoParams(discrimination=False)}),
        ("hargo_no_confidence", {"kl_coef": 0.04, "hargo": HargoParams(confidence=False)}),
        ("hargo_label_control", {"kl_coef": 0.04, "hargo": HargoParams(label_control=True)}),
    ],
)
def test_preset_values(name: str, expected: dict[str, object]) -> None:
    resolved = resolve_algorithm(AlgorithmSection(name=name))
    for field, value in expected.items():
        assert getattr(resolved, field) == value, field


def test_overrides_field_by_field() -> None:
    section = AlgorithmSection(name="dapo", clip_high=0.3, kl_coef=0.01, agg="seq-mean-token-mean",
                               overlong_buffer=8, dual_clip=3.0, dpo_beta=0.5)
    resolved = resolve_algorithm(section)
    assert resolved.clip_high == 0.3 and resolved.kl_coef == 0.01
    assert resolved.agg == "seq-mean-token-mean" and resolved.overlong_buffer == 8
    assert resolved.clip_low == 0.2  # left None: preset value kept
    assert resolved.dual_clip == 3.0 and resolved.dpo_beta == 0.5


def test_hargo_dict() -> None:
    resolved = resolve_algorithm(AlgorithmSection(name="hargo",
                                                  hargo={"confidence": False, "max_weight": 4}))
    assert resolved.hargo == HargoParams(confidence=False, max_weight=4.0)
    assert resolved.needs_reference
    # a plain mapping (API users without the config) is validated by HargoParams.from_dict
    with pytest.raises(ValueError, match=r"algorithm.hargo: unknown key 'alpha' \(valid: "):
        resolve_algorithm(SimpleNamespace(name="hargo", hargo={"alpha": 1}))
    # validated, but unused, for other methods
    assert resolve_algorithm(AlgorithmSection(name="grpo", hargo={"max_weight": 2})).hargo is None
    with pytest.raises(ValueError, match="max_weight"):
        resolve_algorithm(SimpleNamespace(name="grpo", hargo={"max_weight": 0.1}))
    with pytest.raises(ValueError, match="max_weight"):  # the typed config section refuses too
        AlgorithmSection(name="grpo", hargo={"max_weight": 0.1})


def test_unknown_values_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown method 'ppo' \(valid: grpo, dr_grpo, "):
        resolve_algorithm(SimpleNamespace(name="ppo"))
    with pytest.raises(ValueError,
                       match=r"algorithm.estimator: unknown advantage estimator 'x' \(registered"):
        resolve_algorithm(SimpleNamespace(name="grpo", estimator="x"))
    with pytest.raises(ValueError, match=r"algorithm.agg: unknown value 'mean'"):
        resolve_algorithm(SimpleNamespace(name="grpo", agg="mean"))
    # the typed config refuses the same names already, with the config's one-line error
    for key, value in (("estimator", "x"), ("agg", "mean"), ("kl_estimator", "k4")):
        with pytest.raises(ConfigError, match=rf"<config>: algorithm.{key}: bad value '{value}'"):
            validate_config({"algorithm": {key: value}})


def test_policy_loss_kwargs_and_helpers() -> None:
    rloo = resolve_algorithm(AlgorithmSection(name="rloo"))
    assert rloo.policy_loss_kwargs()["kl_coef"] == 0.0  # KL goes into the reward instead
    gspo = resolve_algorithm(AlgorithmSection(name="gspo")).policy_loss_kwargs()
    assert gspo["ratio_level"] == "sequence" and gspo["loss_type"] == "ppo"
    dapo = resolve_algorithm(AlgorithmSection(name="dapo"))
    assert dapo.overlong_buffer_tokens(64) == 12  # a fifth, as DAPO's 4096 / 20480
    assert resolve_algorithm(AlgorithmSection(name="grpo")).overlong_buffer_tokens(64) == 0
    assert not resolve_algorithm(AlgorithmSection(name="dr_grpo")).needs_reference
    assert resolve_algorithm(AlgorithmSection(name="dpo")).needs_reference


def test_resolved_is_frozen() -> None:
    resolved = resolve_algorithm(AlgorithmSection())
    with pytest.raises(AttributeError):
        resolved.kl_coef = 1.0  # type: ignore[misc]


def test_dr_grpo_normaliser_is_the_generation_limit() -> None:
    kwargs = resolve_algorithm(AlgorithmSection(name="dr_grpo")).policy_loss_kwargs(256)
    assert kwargs["agg"] == "seq-mean-token-sum-norm" and kwargs["max_length"] == 256


def test_hargo_estimators_must_agree() -> None:
    with pytest.raises(ValueError, match=r"algorithm\.estimator 'rloo' and algorithm\.hargo"):
        resolve_algorithm(AlgorithmSection(name="hargo", estimator="rloo"))
    both = resolve_algorithm(
        AlgorithmSection(name="hargo", estimator="rloo", hargo={"estimator": "rloo"})
    )
    assert both.estimator == "rloo" and both.hargo.estimator == "rloo"


def test_hargo_defaults_and_presets() -> None:
    # the new default statistics; the first reading is the hargo_std_batch preset
    default = HargoParams()
    assert (default.discrimination_stat, default.confidence_stat) == ("balance",
                                                                      "uncertain_mean")
    assert not default.label_control and not default.confidence_standardise
    assert default.confidence_scale == 0.5 and default.discrimination_power == 0.5
    assert HARGO_PRESETS == ("hargo", "hargo_std_batch", "hargo_no_discrimination",
                             "hargo_no_confidence", "hargo_label_control")
    for name in HARGO_PRESETS:  # every HARGO preset is GRPO plus weights
        resolved = resolve_algorithm(AlgorithmSection(name=name))
        assert resolved.needs_reference and resolved.loss == "ppo"
        assert resolved.agg == "seq-mean-token-mean" and resolved.hargo is not None


def test_hargo_overrides_on_an_ablation_preset() -> None:
    resolved = resolve_algorithm(AlgorithmSection(
        name="hargo_std_batch", hargo={"discrimination_power": 1, "contrast_momentum": 0.5}))
    assert resolved.hargo == HargoParams(discrimination_stat="std_batch",
                                         confidence_stat="token_mean", confidence_scale=1.0,
                                         discrimination_power=1.0, contrast_momentum=0.5)
    # a key the file writes overrides the preset, even at the default value
    on = resolve_algorithm(AlgorithmSection(name="hargo_no_confidence",
                                            hargo={"confidence": True}))
    assert on.hargo == HargoParams()
    # a non-default value overrides even what the preset set
    other = resolve_algorithm(AlgorithmSection(name="hargo_std_batch",
                                               hargo={"confidence_stat": "min"}))
    assert other.hargo is not None
    assert (other.hargo.discrimination_stat, other.hargo.confidence_stat) == ("std_batch",
                                                                              "min")
    assert hargo_overrides(None) == {}
    assert hargo_overrides({"max_weight": 9.0, "eps": 1e-3}) == {"max_weight": 9.0, "eps": 1e-3}


def test_hargo_keys_are_checked_on_every_hargo_preset() -> None:
    for name in HARGO_PRESETS:
        with pytest.raises(ValueError, match=r"^algorithm.hargo: unknown key 'beta' \(valid: "):
            resolve_algorithm(SimpleNamespace(name=name, hargo={"beta": 1}))
        with pytest.raises(ValueError, match=r"^algorithm.hargo: discrimination_stat: bad value "
                                             r"'sigma'"):
            resolve_algorithm(SimpleNamespace(name=name, hargo={"discrimination_stat": "sigma"}))
        with pytest.raises(ValueError, match=r"algorithm\.estimator 'rloo' and algorithm\.hargo"):
            resolve_algorithm(AlgorithmSection(name=name, estimator="rloo"))
    # the typed config refuses them too, in one line naming the key
    with pytest.raises(ConfigError, match=r"algorithm.hargo.confidence_stat: bad value 'avg'"):
        validate_config({"algorithm": {"name": "hargo_no_confidence",
                                       "hargo": {"confidence_stat": "avg"}}})
    with pytest.raises(ConfigError,
                       match=r"^<config>: unknown key 'algorithm.hargo.labels' \(allowed"):
        validate_config({"algorithm": {"name": "hargo_label_control",
                                       "hargo": {"labels": ["a"]}}})


@pytest.mark.parametrize("name", ["hargo_std_batch", "hargo_no_confidence", "hargo_label_control"])
def test_a_saved_config_resolves_to_the_same_hargo_params(name: str) -> None:
    # the resolved config written next to a run lists the algorithm.hargo keys the file set;
    # read back, it gives the same method (the preset's params, plus the run's override)
    cfg = validate_config({"algorithm": {"name": name, "hargo": {"max_weight": 4}}})
    assert cfg.to_dict()["algorithm"]["hargo"] == {"max_weight": 4.0}
    again = validate_config(tomllib.loads(cfg.to_toml()))
    assert again.algorithm.hargo.model_fields_set == {"max_weight"}
    first, second = resolve_algorithm(cfg.algorithm), resolve_algorithm(again.algorithm)
    assert first.hargo == second.hargo
    assert first.hargo is not None and first.hargo.max_weight == 4.0
    preset = PRESETS[name].hargo
    assert preset is not None and first.hargo == preset.model_copy(update={"max_weight": 4.0})
