"""The `#SBATCH` options of one job kind: the one list both batch paths are built from.

`sbatch_options` turns a config's `[slurm.<kind>]` resources into option pairs, which the
batch templates write one `#SBATCH` line each (`sbatch_line`) and from which
`executor.slurm_parameters` derives submitit's parameters, so a resource cannot reach one path
and not the other. `JOB_ENVIRONMENT` holds the shell lines every job runs before its command.
The option list, the time-limit signal and the submitit mapping: docs/slurm.md, "One list of
`#SBATCH` options" and "submitit".
"""

from __future__ import annotations

import os
import shlex

from hargo_hpc.config import JobResources

Option = tuple[str, str]

TIME_SIGNAL = "USR1"
# one thread per CPU the task holds; the hub offline (the models are local directories); no
# launcher variables
JOB_ENVIRONMENT = (
    'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"',
    # srun does not inherit --cpus-per-task on Slurm 22.05-23.02: each rank got one CPU
    '[ -z "${SLURM_CPUS_PER_TASK:-}" ] || export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"',
    'export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"',
    'export HF_DATASETS_OFFLINE="${HF_DATASETS_OFFLINE:-1}"',
    # a job's ranks come from Slurm: a torch launcher's variables inherited from the submitting
    # shell (sbatch exports it) would make every task a one-process run of its own
    "unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT",
)

# Options that always come from somewhere other than `extra`, and where they come from.
_OWNED = {
    "job-name": "the job's name",
    "partition": "partition",
    "nodes": "nodes",
    "ntasks-per-node": "ntasks_per_node",
    "cpus-per-task": "cpus_per_task",
    "mem": "mem",
    "time": "time",
    "array": "the job's array (array_parallelism for its %limit)",
    "output": "the job's log directory",
    "signal": f"{TIME_SIGNAL}, signal_lead_s before the time limit",
    "requeue": "the job kind (training arrays requeue)",
    "open-mode": "the job kind (append for the requeued training array)",
}
# Options that come from a resource field only when that field is set.
_OPTIONAL = {"gres": "gpus_per_node", "account": "account", "qos": "qos",
             "constraint": "constraint"}


def parse_extra(line: str) -> Option:
    """One `extra` entry ("--name=value", "--name value" or "--flag") as an option pair."""
    text = line.strip()
    if text.startswith("#SBATCH"):
        text = text[len("#SBATCH"):].strip()
    if not text.startswith("--") or len(text) == 2:
        raise ValueError(f"slurm extra option {line!r}: write it in long form, e.g. "
                         "'--constraint=gpu' or '--exclusive'")
    name, sep, value = text[2:].partition("=")
    if not sep and " " in name:
        name, _, value = name.partition(" ")
        sep = " "
    name, value = name.strip(), value.strip()
    if not name or any(c.isspace() for c in name):
        raise ValueError(f"slurm extra option {line!r}: bad option name {name!r}")
    if sep and not value:
        raise ValueError(f"slurm extra option {line!r}: empty value")
    return name, value


def sbatch_options(
    resources: JobResources,
    *,
    job_name: str,
    array: str = "",
    log_dir: str | os.PathLike[str] | None = None,
    to_steps: bool = False,
    requeue: bool = False,
) -> list[Option]:
    """The `#SBATCH` options of a job kind, in the order the templates write them: `(name,
    value)` pairs, the long option name without `--` and "" as the value of a flag.

    `array` is an sbatch `--array` range ("0-7"; `resources.array_parallelism` adds its
    `%limit`); `log_dir` adds `--output` (`%x-%j.out`, or `%x-%A_%a.out` for an array);
    None leaves the output to the caller (submitit chooses its own). `resources.extra` lines
    come last but before the signal; one that repeats an option set here is an error.
    """
    res = resources
    options: list[Option] = [
        ("job-name", job_name),
        ("partition", res.partition),
        ("nodes", str(res.nodes)),
        ("ntasks-per-node", str(res.ntasks_per_node)),
        ("cpus-per-task", str(res.cpus_per_task)),
    ]
    if res.gpus_per_node:
        options.append(("gres", f"gpu:{res.gpus_per_node}"))
    options += [("mem", res.mem), ("time", res.time)]
    if array:
        limit = f"%{res.array_parallelism}" if res.array_parallelism else ""
        options.append(("array", f"{array}{limit}"))
    if log_dir is not None:
        pattern = "%x-%A_%a.out" if array else "%x-%j.out"
        options.append(("output", f"{os.fspath(log_dir)}/{pattern}"))
    for name in ("account", "qos", "constraint"):
        if getattr(res, name):
            options.append((name, getattr(res, name)))
    taken = dict(_OWNED) | {name: _OPTIONAL[name] for name, _ in options if name in _OPTIONAL}
    for line in res.extra:
        name, value = parse_extra(line)
        if name in taken:
            raise ValueError(f"slurm extra option {line!r}: --{name} is set by {taken[name]}")
        taken[name] = "an earlier extra option"
        options.append((name, value))
    if requeue:  # a requeued task appends to its log instead of truncating it
        options += [("requeue", ""), ("open-mode", "append")]
    target = "" if to_steps else "B:"
    options.append(("signal", f"{target}{TIME_SIGNAL}@{res.signal_lead_s}"))
    return options


def sbatch_line(option: Option) -> str:
    """`#SBATCH --name=value` (value shell-quoted as submitit does), or `#SBATCH --flag`."""
    name, value = option
    return f"#SBATCH --{name}={shlex.quote(value)}" if value else f"#SBATCH --{name}"


def signal_lead_s(value: str) -> int:
    """The seconds before the time limit of a `--signal` value ("B:USR1@60" -> 60)."""
    _, at, lead = value.rpartition("@")
    if not at or not lead.isdigit():
        raise ValueError(f"--signal={value}: no '@seconds' lead time")
    return int(lead)


def minutes(time: str) -> int:
    """A Slurm time limit in whole minutes (at least 1, seconds rounded up).

    Slurm's forms: MM, MM:SS, HH:MM:SS, and with days D-HH, D-HH:MM, D-HH:MM:SS.
    """
    try:
        days, dash, rest = time.rpartition("-")
        parts = [int(p) for p in rest.split(":")]
        if dash:
            if len(parts) > 3:
                raise ValueError
            hours, mins, seconds = ([*parts, 0, 0])[:3]
        elif len(parts) == 1:
            hours, mins, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, mins, seconds = 0, parts[0], parts[1]
        elif len(parts) == 3:
            hours, mins, seconds = parts
        else:
            raise ValueError
        total = (int(days) if dash else 0) * 1440 + hours * 60 + mins + (1 if seconds else 0)
    except ValueError:
        raise ValueError(f"bad Slurm time limit {time!r}") from None
    return max(1, total)
