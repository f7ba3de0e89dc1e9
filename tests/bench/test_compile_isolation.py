"""Compiles that read nothing: the compiler and the assembler see only the toolchain and their
own build directory (a mount namespace), whatever text trick gets an include or an `.incbin`
past the text checks; the text checks still refuse the known tricks early, with a clear reason.
No file's content may reach the record (`output`, `reason`), and no trick ends `ok`."""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import pytest

from hargo_hpc.bench import build as build_mod
from hargo_hpc.bench import namespaces, run_request
from hargo_hpc.bench.build import TOOLCHAIN_VIEW, build_kernel
from hargo_hpc.bench.cache import CompileCache
from hargo_hpc.bench.namespaces import mountns_mode
from hargo_hpc.bench.reference import kernel_source
from hargo_hpc.bench.sandbox import Limits, base_env, run_sandboxed, sandbox_ids
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.uids import leased_uid

from .procs import sandbox_processes
from .sources import NAIVE_BODY, SIG

HOSTNAME = Path("/etc/hostname").read_text().strip()
needs_mountns = pytest.mark.skipif(mountns_mode() is None, reason="no mount namespace here")


@pytest.fixture()
def secret(scratch_root: Path) -> tuple[Path, str]:
    """A world-readable file the sandbox user could read without the mount namespace: a C
    definition of a string holding a fresh token."""
    token = f"HARGO-SECRET-{secrets.token_hex(8)}"
    directory = Path(tempfile.mkdtemp(prefix="secret-", dir=scratch_root))
    os.chmod(directory, 0o755)
    path = directory / "secret.h"
    path.write_text(f'static const char hargo_secret[] = "{token}";\n')
    os.chmod(path, 0o644)
    yield path, token
    path.unlink()
    directory.rmdir()


@pytest.fixture(autouse=True)
def _no_survivors():
    yield
    assert sandbox_processes() == [], "a sandboxed process survived its run"


def leaked(text: str, content: str) -> bool:
    """Whether `content` (a file's text) shows in `text`; a short one (a hostname like "vm")
    only in the forms a leak takes: gcc's source excerpt, a printed blob, a quoted token."""
    if len(content) >= 6:
        return content in text
    return any(form in text for form in (f"| {content}", f"<<{content}", f"'{content}'"))


def include_trick(path: str) -> str:
    """A string literal holding "/*" used to blind the comment stripper, so the absolute
    #include between the two literals went unchecked (and, holding C, it compiled)."""
    return (
        '#include <stdio.h>\nstatic const char *open_comment = "/*";\n'
        f'#include "{path}"\nstatic const char *close_comment = "*/";\n'
        f"{SIG} {{\n    static int said;\n"
        '    if (!said) { said = 1; fprintf(stderr, "<<%s>>\\n", hargo_secret); }\n'
        "    (void)open_comment; (void)close_comment;\n"
        f"{NAIVE_BODY}}}\n"
    )


def incbin_trick(path: str) -> str:
    """An assembler comment inside the directive: `.inc/**/bin` is `.incbin` to GNU as, but
    neither the source check nor the scan of kernel.s saw a directive."""
    return (
        "#include <stdio.h>\n"
        '__asm__(".section .rodata\\nhargo_blob:\\n.inc/**/bin \\"' + path + '\\"\\n'
        '.byte 0\\n.text");\nextern const char hargo_blob[];\n'
        f"{SIG} {{\n    static int said;\n"
        '    if (!said) { said = 1; fprintf(stderr, "<<%s>>\\n", hargo_blob); }\n'
        f"{NAIVE_BODY}}}\n"
    )


def request(code: str, settings: BenchSettings, cache_dir: str) -> dict:
    return run_request({"id": "trick", "completion": f"```c\n{code}```\n"}, settings,
                       cache_dir=cache_dir)  # fmt: skip


def assert_refused(rec: dict, content: str) -> None:
    assert rec["status"] in ("format_violation", "compile_error"), (rec["status"], rec["reason"])
    assert not leaked(rec["output"] + rec["reason"], content), (rec["reason"], rec["output"])


# the tricks, end to end: refused by the text checks before anything is compiled


def test_string_literal_comment_trick(secret, settings, cache_dir, run_tmp) -> None:
    path, token = secret
    rec = request(include_trick(str(path)), settings, cache_dir)
    assert_refused(rec, token)
    assert rec["status"] == "format_violation" and "#include" in rec["reason"], rec["reason"]


def test_assembler_comment_trick(secret, settings, cache_dir, run_tmp) -> None:
    path, token = secret
    rec = request(incbin_trick(str(path)), settings, cache_dir)
    assert_refused(rec, token)
    assert rec["status"] == "format_violation" and ".incbin" in rec["reason"], rec["reason"]


def test_etc_hostname_by_an_include_trick(settings, cache_dir, run_tmp) -> None:
    assert_refused(request(include_trick("/etc/hostname"), settings, cache_dir), HOSTNAME)


def test_etc_hostname_by_an_incbin_trick(settings, cache_dir, run_tmp) -> None:
    assert_refused(request(incbin_trick("/etc/hostname"), settings, cache_dir), HOSTNAME)


# the mount namespace alone: the text checks bypassed (build_kernel directly, the assembly scan
# switched off), the file is still not there for the compiler or the assembler


def build(code: str, settings: BenchSettings, cache: str | Path):
    with leased_uid(settings.sandbox_uids) as uid:
        return build_kernel(code, settings, CompileCache(cache), timeout_s=20.0,
                            ids=sandbox_ids(settings.sandbox_user, uid))  # fmt: skip


@needs_mountns
@pytest.mark.parametrize("which", ["secret", "hostname"])
def test_an_unchecked_include_finds_no_file(which, secret, settings, cache_dir, run_tmp) -> None:
    path, token = secret if which == "secret" else ("/etc/hostname", HOSTNAME)
    res = build(include_trick(str(path)), settings, cache_dir)
    assert res.verdict == "compile_error", (res.verdict, res.reason)
    assert "No such file" in res.output and not leaked(res.output + res.reason, token)
    assert "mountns" in res.sandbox


@needs_mountns
@pytest.mark.parametrize("which", ["secret", "hostname"])
def test_an_unchecked_incbin_finds_no_file(which, secret, settings, cache_dir, run_tmp,
                                           monkeypatch) -> None:  # fmt: skip
    path, token = secret if which == "secret" else ("/etc/hostname", HOSTNAME)
    monkeypatch.setattr(build_mod, "scan_assembly", lambda _path, _limit: None)
    res = build(incbin_trick(str(path)), settings, cache_dir)
    assert res.verdict == "compile_error", (res.verdict, res.reason)
    assert "not found" in res.output and not leaked(res.output + res.reason, token)


@needs_mountns
def test_other_requests_build_directories_are_not_there(settings, cache_dir, run_tmp) -> None:
    """Another request's sources sit in a sibling of this build's directory (same temp dir):
    not even a known path reaches them."""
    other = Path(tempfile.mkdtemp(prefix="hargo-build-"))  # in run_tmp, like a real build
    os.chmod(other, 0o755)
    token = f"HARGO-OTHER-{secrets.token_hex(8)}"
    (other / "kernel.c").write_text(f'static const char hargo_secret[] = "{token}";\n')
    os.chmod(other / "kernel.c", 0o644)
    try:
        res = build(include_trick(str(other / "kernel.c")), settings, cache_dir)
    finally:
        (other / "kernel.c").unlink()
        other.rmdir()
    assert res.verdict == "compile_error" and token not in res.output + res.reason, res.output


@needs_mountns
def test_the_view_holds_only_the_toolchain_and_the_workdir(run_tmp) -> None:
    workdir = tempfile.mkdtemp(prefix="hargo-build-")
    os.chmod(workdir, 0o755)
    sibling = Path(tempfile.mkdtemp(prefix="hargo-build-"))
    (sibling / "kernel.c").write_text("secret")
    script = (f"ls -A /; echo --; ls -A {os.path.dirname(workdir)}; echo --; "
              f"cat {sibling}/kernel.c /etc/passwd; echo made > mine.txt; touch /usr/x")
    try:
        out = run_sandboxed(["/bin/sh", "-c", script], workdir,
                            Limits(wall_s=10, cpu_s=10, address_space_mb=1024),
                            base_env(workdir), view=list(TOOLCHAIN_VIEW))  # fmt: skip
        made = Path(workdir, "mine.txt").read_text()
    finally:
        (sibling / "kernel.c").unlink()
        sibling.rmdir()
        for name in os.listdir(workdir):
            os.unlink(os.path.join(workdir, name))
        os.rmdir(workdir)
    top, parent, rest = out.output.split("--\n", 2)
    assert set(top.split()) <= {"bin", "dev", "lib", "lib32", "lib64", "libx32", "sbin", "usr",
                                 workdir.split("/")[1]}, top  # fmt: skip
    assert parent.split() == [os.path.basename(workdir)]
    assert "No such file" in rest and "root:" not in rest and "secret" not in rest
    assert "Read-only file system" in rest and made == "made\n"
    assert "mountns" in out.layers


def test_without_a_mount_namespace_the_layer_is_missing_and_text_checks_hold(
    secret, settings, tmp_path, run_tmp, monkeypatch
) -> None:
    monkeypatch.setattr(namespaces, "mountns_mode", lambda: None)
    res = build(kernel_source("naive"), settings, tmp_path / "cache")
    assert res.verdict == "built" and "mountns" not in res.sandbox
    assert any(m.startswith("mountns") for m in res.sandbox_unavailable), res.sandbox_unavailable
    path, token = secret
    for code in (include_trick(str(path)), incbin_trick(str(path))):
        rec = request(code, settings, str(tmp_path / "cache"))
        assert rec["status"] == "format_violation" and token not in rec["output"], rec
