"""What an engine supports beyond the job commands every engine answers: declared by each engine
(as SkyPilot's provisioners declare theirs) and checked before anything is created or changed.
Imports nothing: every command that opens an engine reads it."""

from __future__ import annotations

from dataclasses import dataclass

from ringleader.errors import UsageError

# What only one engine other than the embedded one does (every other operation: the embedded engine).
ONLY_ON = {"kube_options": "kubernetes"}


@dataclass(frozen=True)
class Support:
    """What an engine can do beyond submit/get/list/logs/delete (which every engine does)."""

    engine: str
    # Ranks start in the submitter's working directory with the search paths and settings of the
    # submitter's shell (this host, ssh hosts or Slurm nodes sharing its file system); not so for
    # pods, which start in their image.
    submitter_context: bool = True
    image: str | None = None  # how --image runs, or None: refused
    cluster_file: bool = False  # `cluster apply` / `cluster get`: the engine keeps a declared cluster
    node_labels: bool = False  # `node label`
    prune: bool = False  # `prune`: finished jobs are the engine's to forget
    emulated_cluster: bool = False  # `cluster up` / `cluster down`
    time_limit: bool = False  # `--time-limit`: the job is stopped at its limit
    kube_options: bool = False  # arena's Kubernetes-only submit options (JobSpec.kube: -n, --cpu, ...)
    # The container options (ContainerOptions.given() spellings: --data, --shm-size, --rdma,
    # --image-pull-policy, --container-user) the engine honours; any other is refused.
    container_options: tuple[str, ...] = ()
    network_tree: bool = False  # `--topology-required/--topology-preferred LEVEL`: it places by the network tree
    start_rules: bool = False  # `--start best|finish`, `--run-time`, `--max-wait`: its queue weighs when to start
    preemption: bool = False  # `--preempt`: its queue stops lower-priority gangs and requeues them
    calibration: bool = False  # `--calibration FILE`: its queue prices the job with a calibration kept with it
    # `--priority N`: its queue orders jobs by it. Not so on Kubernetes, where a pod's priority is
    # its PriorityClass's (-p/--priority-class), which administrators limit per namespace.
    priority: bool = True
    queue_namespaces: bool = False  # `queue create --namespace`: a queue only some namespaces' jobs may use
    # `logs --previous`: a requeued job's previous run, kept in its log files (not so for pods made
    # anew, whose logs go with them)
    previous_logs: bool = False
    more_room: str = "add nodes"  # how a user gives a job that can never fit the room it needs

    def require(self, operation: str, what: str) -> None:
        """Refuse ``what`` (a command, or an option) in one line unless the engine supports it,
        naming the engine that does (never the one in use)."""
        if not getattr(self, operation):
            other = ONLY_ON.get(operation, "embedded")
            fix = (f"leave {what} out, or use --engine {other}" if self.engine == "embedded"
                   else f"use the tool the {self.engine} cluster already has for it, or --engine {other}")  # fmt: skip
            raise UsageError(f"{what} is not supported by the {self.engine} engine", fix)

    def require_container_options(self, given: list[str]) -> None:
        """Refuse, in one line, the first container option given that the engine does not honour."""
        for option in given:
            if option not in self.container_options:
                raise UsageError(
                    f"{option} is not supported by the {self.engine} engine",
                    f"leave {option} out, or use an engine that runs containers with it (--engine embedded)",
                )
