"""`hargo data stats` and `hargo data show` through click's runner on `hargo_hpc.cli.main`,
on the shared HPC-GPT files (read in place, never copied) and small files written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hargo_hpc.cli import main
from hargo_hpc.tasks.prompts import ALPACA

SHARED_FILES = ("task1_ml_perf.json", "task1_plp.json", "task2_c_c++.json")
# sum of len(output) / items of each shared file, by a one-liner over json.load:
# C/C++ 6412 / 1858 = 3.4510, MLPerf 90702 / 1820 = 49.836, PLP 88788 / 603 = 147.24
MEAN_C, MEAN_MLPERF, MEAN_PLP = 6412 / 1858, 90702 / 1820, 88788 / 603


def hargo(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_error_line(result: Result) -> str:
    """The single `error: ...` line of a usage failure (exit 2, nothing on stdout)."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def stats_json(*args: str) -> dict:
    result = hargo("data", "stats", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_stats_of_the_shared_directory(hpc_gpt: Path) -> None:
    got = stats_json(str(hpc_gpt))
    by_task = {t["task"]: t for t in got["tasks"]}
    assert list(by_task) == ["data_race_c", "mlperf_qa", "plp_qa"]
    assert {t: s["items"] for t, s in by_task.items()} == {
        "data_race_c": 1858, "mlperf_qa": 1820, "plp_qa": 603}
    assert by_task["data_race_c"]["labels"] == {"yes": 853, "no": 984, "other": 21}
    assert by_task["mlperf_qa"]["labels"] is None
    # data race keeps yes/no answers: 1858 - 21 = 1837; the QA tasks keep non-empty answers
    assert {t: s["usable"] for t, s in by_task.items()} == {
        "data_race_c": 1837, "mlperf_qa": 1820, "plp_qa": 603}
    assert by_task["data_race_c"]["mean_chars"] == pytest.approx(MEAN_C)
    assert by_task["mlperf_qa"]["mean_chars"] == pytest.approx(MEAN_MLPERF)
    assert by_task["plp_qa"]["mean_chars"] == pytest.approx(MEAN_PLP)
    # PLP / data race: 147.24 / 3.4510 = 42.67, "in the 40s"
    assert (got["longest"], got["shortest"]) == ("plp_qa", "data_race_c")
    assert got["ratio"] == pytest.approx(MEAN_PLP / MEAN_C)
    assert 40 < got["ratio"] < 50


def test_stats_table(hpc_gpt: Path) -> None:
    result = hargo("data", "stats", str(hpc_gpt))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["task", "file", "items", "usable", "yes", "no", "other", "mean",
                                "median", "p90", ">40", "chars"]
    assert lines[1].split()[:8] == ["data_race_c", "task2_c_c++.json", "1858", "1837", "853",
                                    "984", "21", "3.5"]
    assert lines[-1] == ("mean answer length, longest / shortest: plp_qa 147.2 / data_race_c 3.5 "
                         "= 42.7x")


def test_stats_with_a_fortran_file_of_our_own(hpc_gpt: Path, tmp_path: Path) -> None:
    for name in SHARED_FILES:
        (tmp_path / name).symlink_to(hpc_gpt / name)
    outputs = ["yes", "no", "no", " Yes ", "no"]  # lengths 3 + 2 + 2 + 5 + 2 = 14, mean 2.8
    records = [{"instruction": f"Given a Fortran code snippet {i}: race?", "input": "",
                "output": out} for i, out in enumerate(outputs)]
    (tmp_path / "task2_fortran.json").write_text(json.dumps(records))
    got = stats_json(str(tmp_path))
    by_task = {t["task"]: t for t in got["tasks"]}
    assert list(by_task) == ["data_race_c", "data_race_fortran", "mlperf_qa", "plp_qa"]
    fortran = by_task["data_race_fortran"]
    assert (fortran["items"], fortran["usable"]) == (5, 5)
    assert fortran["labels"] == {"yes": 2, "no": 3, "other": 0}
    assert fortran["mean_chars"] == pytest.approx(2.8)
    assert fortran["median_chars"] == 2 and fortran["p90_chars"] == 5  # ceil(0.9*5) = 5th of 5
    # PLP / Fortran = 147.24 / 2.8 = 52.59
    assert (got["longest"], got["shortest"]) == ("plp_qa", "data_race_fortran")
    assert got["ratio"] == pytest.approx(MEAN_PLP / 2.8)


def test_stats_of_one_file(hpc_gpt: Path, tmp_path: Path) -> None:
    got = stats_json(str(hpc_gpt / "task1_plp.json"))  # the task from the published name
    assert [(t["task"], t["items"]) for t in got["tasks"]] == [("plp_qa", 603)]
    assert got["ratio"] is None
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps([{"instruction": "q", "output": "yes"},
                                {"instruction": "q", "output": "no, not here"}]))
    got = stats_json(str(mine), "--task", "data_race_fortran")
    fortran = got["tasks"][0]
    assert (fortran["items"], fortran["usable"]) == (2, 1)
    assert fortran["labels"] == {"yes": 1, "no": 0, "other": 1}
    line = one_error_line(hargo("data", "stats", str(mine)))
    assert line == f"error: {mine}: cannot tell the task from the file name; give --task"


def test_stats_bad_input(tmp_path: Path) -> None:
    line = one_error_line(hargo("data", "stats", str(tmp_path / "nope")))
    assert line == f"error: {tmp_path / 'nope'}: no such file or directory"
    assert one_error_line(hargo("data", "stats", str(tmp_path))).startswith(
        f"error: {tmp_path}: no published task file in it (looked for ")
    bad = tmp_path / "task1_plp.json"
    bad.write_text('[{"instruction": "q", "output": "a"},')
    line = one_error_line(hargo("data", "stats", str(bad)))
    assert line.startswith(f"error: {bad}: not valid JSON: ")
    line = one_error_line(hargo("data", "stats", str(bad), "--task", "no_such_task"))
    assert line.startswith("error: unknown task 'no_such_task' (registered: data_race_c")
    line = one_error_line(hargo("data", "stats", str(bad), "--task", "gemm"))
    assert line == "error: task 'gemm' has no reference answers to count (the bench rewards it)"


def first_records(path: Path, n: int) -> list[dict]:
    return json.loads(path.read_text())[:n]


def test_show_prints_the_alpaca_prompts_and_references(hpc_gpt: Path) -> None:
    result = hargo("data", "show", "data_race_c", "--path", str(hpc_gpt), "-n", "2")
    assert result.exit_code == 0, result.output
    # the first two records of task2_c_c++.json fit the task (answers 'yes' and 'no')
    first, second = first_records(hpc_gpt / "task2_c_c++.json", 2)
    expected = ""
    for number, (record, answer) in enumerate([(first, "yes"), (second, "no")], start=1):
        expected += (f"===== {number}/2 data_race_c:{number - 1} (alpaca) =====\n"
                     "----- prompt -----\n"
                     + ALPACA.format(instruction=record["instruction"]) + "\n"
                     "----- reference -----\n" + answer + "\n")
    assert result.stdout == expected + "===== end =====\n"
    # the 21 records that do not fit are counted on stderr
    assert result.stderr == ("data_race_c: dropped 21 of 1858 records of task2_c_c++.json that "
                             "do not fit the task\n")


def test_show_in_a_chat_template(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")),
        unk_token="[UNK]")
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n"
                               "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
    tokenizer.save_pretrained(tmp_path / "model")
    data = tmp_path / "d.json"
    data.write_text(json.dumps([{"instruction": "Is it racy?", "input": "x = 1", "output": "No"}]))
    for fmt in ("chat", "auto"):
        result = hargo("data", "show", "data_race_fortran", "--path", str(data), "--format", fmt,
                       "--model", str(tmp_path / "model"))
        assert result.exit_code == 0, result.output
        # user_text joins instruction and input with a blank line; the reference is lower-cased
        assert result.stdout == ("===== 1/1 data_race_fortran:0 (chat) =====\n"
                                 "----- prompt -----\n"
                                 "<|user|>Is it racy?\n\nx = 1\n<|assistant|>\n"
                                 "----- reference -----\nno\n===== end =====\n")
    line = one_error_line(hargo("data", "show", "data_race_fortran", "--path", str(data),
                                "--format", "chat"))
    assert line == ("error: prompt format 'chat' needs a tokenizer with a chat template "
                    "(give --model DIR)")
    line = one_error_line(hargo("data", "show", "data_race_fortran", "--path", str(data),
                                "--model", str(tmp_path / "no-model")))
    assert line.startswith(f"error: {tmp_path / 'no-model'}: cannot load a tokenizer: ")


def test_show_bad_input(tmp_path: Path) -> None:
    line = one_error_line(hargo("data", "show", "no_such_task", "--path", str(tmp_path)))
    assert line.startswith("error: unknown task 'no_such_task' (registered: data_race_c, ")
    missing = tmp_path / "missing.json"
    line = one_error_line(hargo("data", "show", "plp_qa", "--path", str(missing)))
    assert line == f"error: {missing}: no such file or directory (data of task 'plp_qa')"
    bad = tmp_path / "bad.json"
    bad.write_text("[{]")
    line = one_error_line(hargo("data", "show", "plp_qa", "--path", str(bad)))
    assert line.startswith(f"error: {bad}: not valid JSON: ")
    bad.write_text(json.dumps([{"instruction": "q", "output": "a"}, {"output": "b"}]))
    line = one_error_line(hargo("data", "show", "plp_qa", "--path", str(bad)))
    assert line == f"error: {bad}: record 1 has no 'instruction'"
    line = one_error_line(hargo("data", "show", "plp_qa", "--path", str(tmp_path)))
    assert line == (f"error: {tmp_path}: no file of task 'plp_qa' in it (looked for "
                    "task1_plp.json)")
