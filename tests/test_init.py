"""`hargo init DIR`: the shipped example jobs copied into DIR/jobs/, each a valid config."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from hargo_hpc.config import load_config
from hargo_hpc.examples import example_jobs

REPO = Path(__file__).resolve().parents[1]
HARGO = shutil.which("hargo") or str(Path(sys.executable).parent / "hargo")
NAMES = ["demo.toml", "gemm_sqd.toml", "hpcgpt_mix.toml", "paper.toml", "sweep.toml",
         "tiny.toml"]


def hargo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HARGO, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_init_copies_every_example_and_each_validates(tmp_path: Path) -> None:
    done = hargo("init", "proj", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"wrote proj/jobs/{name}" for name in NAMES] + [
        "next: hargo config validate proj/jobs/demo.toml"
    ]
    shipped = {job.name: job.read_bytes() for job in example_jobs()}
    assert sorted(shipped) == NAMES
    copied = sorted((tmp_path / "proj" / "jobs").iterdir())
    assert [path.name for path in copied] == NAMES
    for path in copied:
        assert path.read_bytes() == shipped[path.name]
        cfg = load_config(path)
        assert cfg.run.name, path


def test_init_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    jobs = tmp_path / "proj" / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "sweep.toml").write_text("# my edits\n")
    done = hargo("init", str(tmp_path / "proj"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == f"error: {jobs}/sweep.toml exists; use --force to overwrite\n"
    assert done.stdout == ""
    assert [path.name for path in jobs.iterdir()] == ["sweep.toml"]  # nothing else written
    assert (jobs / "sweep.toml").read_text() == "# my edits\n"

    done = hargo("init", "--force", str(tmp_path / "proj"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"wrote {jobs}/sweep.toml" in done.stdout.splitlines()
    assert sorted(path.name for path in jobs.iterdir()) == NAMES
    assert (jobs / "sweep.toml").read_text() != "# my edits\n"
    load_config(jobs / "sweep.toml")

    done = hargo("init", str(tmp_path / "proj"), cwd=tmp_path)  # all five exist now
    assert done.returncode == 2
    assert done.stderr == f"error: {jobs}/demo.toml exists (and 5 more); use --force to overwrite\n"


def test_init_into_a_file_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("")
    done = hargo("init", "taken", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot write taken/jobs")
    assert len(done.stderr.splitlines()) == 1


def test_init_help() -> None:
    done = hargo("init", "--help", cwd=REPO)
    assert done.returncode == 0
    assert "Usage: hargo init [OPTIONS] DIRECTORY" in done.stdout
    assert "--force" in done.stdout
    assert "init" in hargo("--help", cwd=REPO).stdout


def test_source_tree_jobs_is_the_package_copy() -> None:
    """One copy: the top-level jobs/ of a checkout is a link to the shipped examples."""
    jobs = REPO / "jobs"
    assert jobs.is_symlink()
    assert jobs.resolve() == (REPO / "hargo_hpc" / "examples" / "jobs").resolve()
    assert sorted(path.name for path in jobs.glob("*.toml")) == NAMES


def test_source_tree_sbatch_templates_is_the_package_copy() -> None:
    """The mission's layout: the top-level sbatch_templates/ is a link to the shipped ones."""
    templates = REPO / "sbatch_templates"
    assert templates.is_symlink()
    assert templates.resolve() == (REPO / "hargo_hpc" / "slurm" / "templates").resolve()
    assert {"base.sh.j2", "train.sh.j2", "bench_worker.sh.j2"} <= {
        path.name for path in templates.glob("*.j2")}


def test_init_templates_gives_a_site_copy_that_render_uses(tmp_path: Path) -> None:
    done = hargo("init", "--templates", "site", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    site = tmp_path / "site" / "sbatch_templates"
    shipped = sorted((REPO / "sbatch_templates").glob("*.j2"))
    assert sorted(p.name for p in site.iterdir()) == [p.name for p in shipped]
    assert all((site / p.name).read_bytes() == p.read_bytes() for p in shipped)
    assert done.stdout.splitlines()[-1] == (
        f"then: export HARGO_TEMPLATE_DIR={site.resolve()}  (hargo render / submit use it)")
    # a site's edit reaches the rendered script through HARGO_TEMPLATE_DIR
    base = site / "base.sh.j2"
    base.write_text(base.read_text().replace("#!/bin/bash", "#!/bin/bash\n# site: lab-x", 1))
    job = tmp_path / "site" / "jobs" / "tiny.toml"
    env = {**os.environ, "HARGO_TEMPLATE_DIR": str(site)}
    out = tmp_path / "scripts"
    rendered = subprocess.run([HARGO, "render", str(job), f"run.dir={tmp_path / 'runs'}",
                               "-o", str(out)], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    scripts = sorted(out.glob("*.sh"))
    assert scripts and all("# site: lab-x" in s.read_text() for s in scripts)
