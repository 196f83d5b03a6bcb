"""The embedded engine: SQLite state on this machine, no server; ranks on this host, on
emulated nodes, or on ssh hosts (``hosts/``: Open MPI's own ssh launcher).

    engine.py       the Python API (Runtime): submit, get, list, logs, delete, cluster, labels;
                    commands commit intent and wake the agent
    agentctl.py     the agent as commands see it: its lock, wake-up FIFO and beat, starting it
    agent.py        the folder's one resident loop: a thread per running job, its standby
    supervisor.py   one running job, in a thread of the agent: starts, adopts, watches, stops
    lifecycle.py    the queue pass over the state: placing, pending, finishing
    liveness.py     heartbeats and the lease
    store.py        the SQLite state (WAL, schema versions, private files)
    folders.py      the private state folder, never followed through a link
    containers.py   --image where ranks run: the image resolved per host, leftovers removed
    nodes.py        the local node, declared nodes, labels, health
    views.py        rows as the shared read models
    backup.py       state export and import
    faults.py       crash points for the kill tests
"""
