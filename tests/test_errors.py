"""One error family: every exception class the package defines derives from HargoError, and
the command line renders one that a command lets through as one line with its exit code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import click
from click.testing import CliRunner

import hargo_hpc
from hargo_hpc.cli_support import HargoGroup
from hargo_hpc.errors import HargoError


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
