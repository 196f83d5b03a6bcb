"""The local runtime: SQLite state, per-job supervisors, launchers, reconcile and the Python API.

Import ``ringleader.runtime.api`` for the API; this package itself imports nothing heavy so that
the rank wrapper (``python -m ringleader.runtime.rank``) starts fast.
"""
