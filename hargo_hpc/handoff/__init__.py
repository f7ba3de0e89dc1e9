"""The shared-filesystem handoff between the trainer and the bench worker array.

Requests and results move as files through a directory on the shared filesystem; nothing
relies on locks or on Slurm. See docs/handoff.md for the layout and the protocol.
The names below are imported on first use: `hargo_hpc.handoff.settings` stays light.
"""

from hargo_hpc._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "HandoffError": "hargo_hpc.handoff.errors",
    "SchemaError": "hargo_hpc.handoff.errors",
    "HandoffSettings": "hargo_hpc.handoff.settings",
    "Trainer": "hargo_hpc.handoff.trainer",
    "Worker": "hargo_hpc.handoff.worker",
    "Dispatch": "hargo_hpc.handoff.workloads",
    "register_workload": "hargo_hpc.handoff.workloads",
    "worker_id_from_env": "hargo_hpc.handoff.worker",
})
