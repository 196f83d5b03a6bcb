"""The embedded engine: SQLite state on this machine, no server; ranks on this host, on
emulated nodes, or on ssh hosts (``hosts/``: Open MPI's own ssh launcher).

    engine.py       the Python API (Runtime): submit, get, list, logs, delete, cluster, labels
    store.py        the SQLite state (WAL, schema versions, private files)
    lifecycle.py    the queue pass over the state, starting supervisors
    supervisor.py   one process per running job: starts its ranks, records their ends
    reconcile.py    jobs whose supervisor died, finished from their state files
    nodes.py        the local node, declared nodes, labels
    views.py        rows as the shared read models
    backup.py       state export and import
    faults.py       crash points for the kill tests
"""
