"""benchmarks/bench_harness.py without running its figures (they time the machine for minutes):
it answers --help, parses its arguments, and figure 4's goals are computed as documented
(busy CV <= 2 x idle CV; busy median over idle median within 10 %)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_harness.py"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_harness", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_it_answers_help_without_running_anything() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--figures" in done.stdout and "--requests" in done.stdout
    assert "load average" not in done.stdout  # no figure ran


def test_arguments() -> None:
    bench = script()
    args = bench.arguments(["--figures", "4", "--requests", "12"])
    assert args.figures == {4} and args.requests == 12
    assert bench.arguments([]).figures == {1, 2, 3, 4, 5, 6}
    assert bench.arguments([]).requests == 10
    for bad in (["--figures", "7"], ["--requests", "1"]):
        with pytest.raises(SystemExit):
            bench.arguments(bad)


def test_figure_4s_goals_by_hand() -> None:
    bench = script()
    # idle 19, 20, 21: mean 20, stdev 1 -> CV 5 %; busy 17, 20, 23: stdev 3 -> CV 15 %:
    # 15 > 2 x 5, the CV goal is missed; medians 20 / 20 = 1.0, the ratio goal is met
    noisy = bench.BusyIdle((19.0, 20.0, 21.0), (17.0, 20.0, 23.0))
    assert noisy.idle_cv == pytest.approx(5.0) and noisy.busy_cv == pytest.approx(15.0)
    assert not noisy.cv_goal and noisy.ratio == pytest.approx(1.0) and noisy.ratio_goal
    assert "MISSED" in noisy.line() and "met" in noisy.line()
    # busy 17, 17.5, 18: CV 2.86 % <= 10 %, met; medians 17.5 / 20 = 0.875, missed
    slow = bench.BusyIdle((19.0, 20.0, 21.0), (17.0, 17.5, 18.0))
    assert slow.busy_cv == pytest.approx(100 * 0.5 / 17.5) and slow.cv_goal
    assert slow.ratio == pytest.approx(0.875) and not slow.ratio_goal
    assert bench.BusyIdle((19.0, 20.0, 21.0), (18.1, 18.2, 18.3)).ratio_goal  # 0.91
