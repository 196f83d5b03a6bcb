"""What runs beside a job's ranks on every engine that starts processes (embedded, ssh hosts,
Slurm): the rank wrapper and its wire format, the per-rank plan files, process control and
containers.

The rank wrapper (``runtime/rank.py``, run as a file) starts once per rank: this package
imports nothing, and the wrapper only the standard library. Never imports an engine.
"""
