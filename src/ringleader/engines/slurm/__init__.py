"""The `slurm` engine: ringleader's placement on a Slurm cluster, exact nodes and GPU ids.

    engine = open_slurm(home)       # SLURM_CONF (or /etc/slurm) says which cluster

See docs/slurm.md for the mechanism (one heterogeneous job, per-GPU GRES types) and setup.
"""

from ringleader.engines.slurm.engine import SlurmEngine, open_slurm

__all__ = ["SlurmEngine", "open_slurm"]
