"""One error family: every exception class the package defines derives from HargoError, and
the command line renders one that a command lets through as one line with its exit code, in
one place (`cli.support`): no command catches one to rewrap it."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import hargo_hpc
from hargo_hpc.cli.support import HargoGroup, command, group, one_line
from hargo_hpc.errors import HargoError
from hargo_hpc.tasks.base import DataError


def test_every_package_error_is_a_hargo_error() -> None:
    found = {}
    for info in pkgutil.walk_packages(hargo_hpc.__path__, "hargo_hpc."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, Exception) and cls.__module__ == module.__name__
                    and not issubclass(cls, click.ClickException)):
                found[f"{module.__name__}.{name}"] = cls
    assert len(found) >= 15  # the packages' errors were found at all
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, HargoError))
    assert outside == []


def test_a_hargo_error_a_command_lets_through_is_one_line() -> None:
    class Broken(HargoError, ValueError):
        exit_code = 3

    @click.group(cls=HargoGroup)
    def main() -> None:
        pass

    @main.group()
    def area() -> None:
        pass

    @area.command()
    def go() -> None:
        raise Broken("the file x.toml:\n  line 3 is bad")

    done = CliRunner().invoke(main, ["area", "go"])
    assert done.exit_code == 3
    assert done.stderr == "error: the file x.toml: line 3 is bad\n"
    assert done.stdout == ""


def test_a_group_invoked_on_its_own_renders_errors_alike() -> None:
    @group()
    def area() -> None:
        pass

    @area.command()
    def go() -> None:
        raise DataError("data.json: record 3 has no 'output'")

    @command()
    def alone() -> None:
        with one_line(OSError, prefix="reading: "):
            raise FileNotFoundError("no such file")

    done = CliRunner().invoke(area, ["go"])
    assert (done.exit_code, done.stderr) == (2, "error: data.json: record 3 has no 'output'\n")
    done = CliRunner().invoke(alone, [])
    assert (done.exit_code, done.stderr) == (2, "error: reading: no such file\n")


def test_one_line_leaves_a_hargo_error_to_the_group() -> None:
    # a DataError is a ValueError, but not converted here
    with pytest.raises(DataError), one_line(ValueError):
        raise DataError("x")
    with pytest.raises(click.ClickException, match=r"^bad$"), one_line(ValueError):
        raise ValueError("bad")


def _names_imported(tree: ast.Module) -> dict[str, object]:
    """Every name a module imports with `from X import Y`, anywhere in its body."""
    found: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            module = importlib.import_module(node.module)
            for alias in node.names:
                found[alias.asname or alias.name] = getattr(module, alias.name, None)
    return found


def test_no_command_catches_a_hargo_error_to_rewrap_it() -> None:
    """The group renders every HargoError: a command that catches one to raise again (a
    UsageFailure of its text) is a second error path. Catching one to go on (a skipped check)
    is fine; `cli.support` is the one place that renders them."""
    import hargo_hpc.cli

    rewraps = []
    for info in pkgutil.iter_modules(hargo_hpc.cli.__path__, "hargo_hpc.cli."):
        if info.name == "hargo_hpc.cli.support":
            continue
        path = Path(importlib.import_module(info.name).__file__ or "")
        tree = ast.parse(path.read_text())
        names = _names_imported(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ExceptHandler) or node.type is None or not any(
                    isinstance(inner, ast.Raise) for inner in ast.walk(node)):
                continue
            caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            for expr in caught:
                cls = names.get(expr.id) if isinstance(expr, ast.Name) else None
                if isinstance(cls, type) and issubclass(cls, HargoError):
                    rewraps.append(f"{path.name}:{node.lineno} catches {expr.id}")
    assert len(list(pkgutil.iter_modules(hargo_hpc.cli.__path__))) >= 10
    assert rewraps == []
