"""`hargo eval score` and `hargo eval winrate`: metrics of prediction files, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hargo_hpc.cli import main
from hargo_hpc.tasks.data_race import METRIC_KEYS, SKILL_KEYS

from .test_winrate import build_tiny_lm

# The ten predictions of test_data_race's hand computation: TP 3, FP 2, TN 2, FN 1, 2 unparsable
LABELS = ["yes", "yes", "yes", "yes", "no", "no", "no", "no", "yes", "no"]
PREDICTIONS = ["yes\n\n### Instruction:\nno", "Yes", " yes ", "no", "no", "NO", "yes",
               "  YES \n", "maybe", "No."]


def _write(path: Path, records: list[dict[str, Any]], jsonl: bool = False) -> str:
    if jsonl:
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        path.write_text(json.dumps(records, indent=1))
    return str(path)


def _race(tmp_path: Path, name: str = "race.json",
          predictions: list[str] = PREDICTIONS) -> str:
    records = [{"instruction": f"code {i}", "output": label, "prediction": p}
               for i, (label, p) in enumerate(zip(LABELS, predictions, strict=True))]
    return _write(tmp_path / name, records)


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, ["eval", *args])


def _fails(result: Result, *parts: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for part in parts:
        assert part in lines[0], lines[0]


def test_score_data_race_json_has_hpc_gpts_keys_then_the_skill_keys(tmp_path: Path) -> None:
    result = _run("score", "data_race_c", _race(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert tuple(got) == METRIC_KEYS + SKILL_KEYS
    assert (got["tp"], got["fp"], got["tn"], got["fn"]) == (3, 2, 2, 1)
    # P 3/5, R 3/4, F1 2/3, support 8/10, adjusted .8 * 2/3
    assert got["f1"] == pytest.approx(2 / 3)
    assert got["support_rate"] == pytest.approx(0.8)
    assert got["adjusted_f1"] == pytest.approx(0.8 * 2 / 3)
    assert got["specificity"] == pytest.approx(0.5)


def test_score_prints_a_table(tmp_path: Path) -> None:
    result = _run("score", "data_race_c", _race(tmp_path))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("data_race_c: 10 predictions in ")
    assert [line.split()[0] for line in lines[1:]] == list(METRIC_KEYS + SKILL_KEYS)
    assert lines[len(METRIC_KEYS)].split() == ["adjusted_f1", "0.5333"]  # .8 * 2/3


def test_score_mlperf_from_jsonl(tmp_path: Path) -> None:
    records = [{"instruction": "n?", "output": "896", "prediction": "896"},
               {"output": "NVIDIA NeMo Megatron Release 23.04",
                "prediction": "NVIDIA NeMo Megatron"}]
    path = _write(tmp_path / "p.jsonl", records, jsonl=True)
    got = json.loads(_run("score", "mlperf_qa", path, "--json").stdout)
    # EM (1 + 0) / 2; F1 (1 + .75) / 2; lengths (3 + 20) / 2, the references' (3 + 34) / 2
    assert got == {"n": 2, "exact_match": 0.5, "f1": 0.875, "mean_chars": 11.5,
                   "reference_chars": 18.5, "share_over_40": 0.0}


def test_score_plp_with_the_embedding_model(tmp_path: Path) -> None:
    reference = "The BigCloneBench dataset contains 900K code samples."
    records = [{"output": reference, "prediction": reference},
               {"output": reference, "prediction": ""}]
    got = json.loads(_run("score", "plp_qa", _write(tmp_path / "p.json", records), "--json").stdout)
    # similarities 1 (the reference itself) and 0 (empty): mean .5; lengths (53 + 0) / 2
    assert got["n"] == 2 and got["similarity"] == pytest.approx(0.5, abs=1e-5)
    assert got["mean_chars"] == len(reference) / 2


def test_score_refuses_bad_input(tmp_path: Path) -> None:
    good = _race(tmp_path)
    _fails(_run("score", "nope", good), "unknown task 'nope'", "data_race_c")
    _fails(_run("score", "gemm", good), "hargo bench")
    _fails(_run("score", "data_race_c", str(tmp_path / "missing.json")), "missing.json",
           "cannot read")
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps({"output": "yes", "prediction": "yes"}, indent=1))
    _fails(_run("score", "data_race_c", str(obj)), "obj.json: line 1: not valid JSON",
           "JSON list")
    broken = tmp_path / "broken.json"
    broken.write_text('[{"output": "yes",')
    _fails(_run("score", "data_race_c", str(broken)), "broken.json: not valid JSON")
    records = [{"output": "yes", "prediction": "yes"}, {"output": "no"}]
    _fails(_run("score", "data_race_c", _write(tmp_path / "np.json", records)),
           "np.json: record 1 has no 'prediction'")
    records = [{"output": "yes", "prediction": None}]
    _fails(_run("score", "data_race_c", _write(tmp_path / "null.json", records)),
           "null.json: record 0 has a non-string 'prediction'")
    _fails(_run("score", "data_race_c", _write(tmp_path / "s.json", ["yes"])),
           "s.json: record 0 is not an object")
    records = [{"output": "yes", "prediction": "yes"}, {"output": "maybe", "prediction": "no"}]
    _fails(_run("score", "data_race_c", _write(tmp_path / "ref.json", records)),
           "ref.json: record 1: output 'maybe' is not a data_race_c reference")
    _fails(_run("score", "mlperf_qa", _write(tmp_path / "empty.json", [])),
           "empty.json: no records")


def test_winrate_auto_of_a_system_against_another(tmp_path: Path) -> None:
    a = _race(tmp_path, "a.json")
    better = ["yes", "yes", "yes", "yes", "no", "no", "no", "no", "yes", "no"]  # all correct
    b = _race(tmp_path, "b.json", better)
    result = _run("winrate", a, b, "--task", "data_race_c", "--json")
    assert result.exit_code == 0, result.output
    # A correct on records 0, 1, 2, 4, 5 (ties with B), wrong or unparsable on the other 5
    assert json.loads(result.stdout) == {"n": 10, "wins": 0, "losses": 5, "ties": 5,
                                         "win_rate": 0.25}  # (0 + 5/2) / 10
    reverse = json.loads(_run("winrate", b, a, "--task", "data_race_c", "--json").stdout)
    assert reverse["win_rate"] == 0.75
    table = _run("winrate", a, b, "--task", "data_race_c", "--margin", "0.5")
    assert table.stdout.splitlines()[-1].split() == ["win_rate", "0.2500"]
    assert "judge auto" in table.stdout


def test_winrate_with_the_llm_judge(tmp_path: Path) -> None:
    model = build_tiny_lm(tmp_path / "judge")
    a, b = _race(tmp_path, "a.json"), _race(tmp_path, "b.json", ["no"] * 10)
    result = _run("winrate", a, b, "--task", "data_race_c", "--judge", f"llm:{model}", "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["n"] == 10 and 0.0 <= got["win_rate"] <= 1.0
    assert got["wins"] + got["losses"] + got["ties"] == 10


def test_winrate_refuses_files_that_do_not_pair(tmp_path: Path) -> None:
    a = _race(tmp_path, "a.json")
    short = [{"instruction": f"code {i}", "output": LABELS[i], "prediction": "yes"}
             for i in range(7)]
    b = _write(tmp_path / "b.json", short)
    _fails(_run("winrate", a, b, "--task", "data_race_c"), "a.json has 10 records",
           "b.json has 7", "record 7")
    moved = [{"instruction": f"code {i}", "output": LABELS[i], "prediction": "yes"}
             for i in range(10)]
    moved[3]["output"] = "no"
    c = _write(tmp_path / "c.json", moved)
    _fails(_run("winrate", a, c, "--task", "data_race_c"), "a.json and", "c.json",
           "differ at record 3: 'output'")
    moved[3]["output"], moved[5]["instruction"] = LABELS[3], "other code"
    d = _write(tmp_path / "d.json", moved)
    _fails(_run("winrate", a, d, "--task", "data_race_c"), "differ at record 5: 'instruction'")
    _fails(_run("winrate", a, a, "--task", "data_race_c", "--judge", "gpt4"), "unknown judge")
    _fails(_run("winrate", a, a, "--task", "data_race_c", "--margin", "-1"),
           "margin must be >= 0")
    _fails(_run("winrate", a, a, "--task", "gemm"), "hargo bench")
