"""The Kubernetes engine, scheduler and node agent.

    engine.py     `--engine kubernetes`: MPIJobs in, the same job views out
    scheduler.py  `ringleader kube scheduler`: informers, gang decisions, bindings, Lease
    agent.py      `ringleader kube agent`: a node's topology and GPU capacity, published
    manifests.py  the MPIJob/PodGroup of a job and the install
    decide.py / cache.py / objects.py  the pure part: one decision per gang over the cache

The official ``kubernetes`` client is imported only by client.py, only when a call needs it.
"""
