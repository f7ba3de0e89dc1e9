"""The shared-filesystem handoff between the trainer and the bench worker array.

Requests and results move as files through a directory on the shared filesystem; nothing
relies on locks or on Slurm. See docs/handoff.md for the layout and the protocol.
"""

from hargo_hpc.handoff.errors import HandoffError, SchemaError
from hargo_hpc.handoff.settings import HandoffSettings
from hargo_hpc.handoff.trainer import Trainer
from hargo_hpc.handoff.worker import Worker, bench_workload, worker_id_from_env

__all__ = [
    "HandoffError", "HandoffSettings", "SchemaError", "Trainer", "Worker", "bench_workload",
    "worker_id_from_env",
]
