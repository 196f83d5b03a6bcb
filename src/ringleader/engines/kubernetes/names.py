"""Every name ringleader reads or writes on a cluster: one place, so the scheduler, the agent,
the manifests and the engine can never disagree about a label or an annotation."""

from __future__ import annotations

from ringleader.jobs.spec import OWN_PREFIX

SCHEDULER_NAME = "ringleader"  # pods' spec.schedulerName
SYSTEM_NAMESPACE = "ringleader-system"
LEASE_NAME = "ringleader-scheduler"
PREFIX = OWN_PREFIX

# Extended resource the agent advertises per node and GPU workers request (a node-level extended
# resource: kubelet admits against it, no device plugin is involved).
GPU_RESOURCE = f"{PREFIX}/gpu"
# Node: the topology the agent found (JSON, see topology_annotation()) and its network speed.
TOPOLOGY_ANNOTATION = f"{PREFIX}/topology"
NETWORK_LABEL = f"{PREFIX}/network-gbps"
# Node: each GPU's UUID in index order (comma-separated), as the agent found them: an index can
# name another GPU after a reboot or an Xid; the DRA driver names devices by UUID attribute.
GPU_UUIDS_ANNOTATION = f"{PREFIX}/gpu-uuids"
# Node: how many of its GPUs NVML reports unhealthy (topology.nvml.unhealthy_gpus), as the agent
# last looked; absent where the agent cannot tell (no NVML, no nvidia-smi).
GPUS_UNHEALTHY_ANNOTATION = f"{PREFIX}/gpus-unhealthy"
# The only annotations the agent may change on its own Node (its admission policy, delivery.py).
AGENT_ANNOTATIONS = (TOPOLOGY_ANNOTATION, GPU_UUIDS_ANNOTATION, GPUS_UNHEALTHY_ANNOTATION)
# Node: which jobs its GPUs serve. ringleader's own name and ACK's, read alike.
SCHEDULE_LABELS = (f"{PREFIX}/gpu-schedule", "ack.node.gpu.schedule")
# Pod: the GPU ids the scheduler chose (comma-separated, as NVIDIA_VISIBLE_DEVICES takes them),
# written by the Binding itself (the API server copies its annotations onto the pod with the
# node), so the container's env (downward API) sees them at start and the scheduler needs no
# right to patch pods.
GPU_IDS_ANNOTATION = f"{PREFIX}/gpu-ids"
# Pod: the UID of the pod those ids were chosen for, written with them by the scheduler's own
# Binding. Ids without it (a pod bound by someone else, a copied or hand-written annotation) are
# never trusted: the pod's GPUs are counted, not its claim to particular ones.
GPU_IDS_UID_ANNOTATION = f"{PREFIX}/gpu-ids-pod-uid"
# Pod: the same GPUs as NVIDIA_VISIBLE_DEVICES best names them: their UUIDs where the node's agent
# publishes them (an index can name another GPU after a reboot or an Xid), else the ids; written
# by the same Binding.
GPU_DEVICES_ANNOTATION = f"{PREFIX}/gpu-devices"
WORKER_INDEX_ANNOTATION = f"{PREFIX}/worker-index"
DECISION_ANNOTATION = f"{PREFIX}/decision"  # one-line summary of the gang decision
PENDING_ANNOTATION = f"{PREFIX}/pending-reason"  # on the PodGroup: why it waits, with numbers
PENDING_CODE_ANNOTATION = f"{PREFIX}/pending-reason-code"  # on the PodGroup: why it waits, in one word
# On the PodGroup, set by its user (`ringleader hold`, "true"): the gang waits, reason Held.
HOLD_ANNOTATION = f"{PREFIX}/hold"
# Pod (template): the network level the gang must stay under (--topology-required) or prefers
# (--topology-preferred), by level name; Kueue's pod-set annotations are read alike, their value
# a node label key whose last part names the level (the tree's levels are named so).
TOPOLOGY_REQUIRED_ANNOTATIONS = (f"{PREFIX}/topology-required", "kueue.x-k8s.io/podset-required-topology")
TOPOLOGY_PREFERRED_ANNOTATIONS = (f"{PREFIX}/topology-preferred", "kueue.x-k8s.io/podset-preferred-topology")
# Pod (template): when the gang starts if its best placement is busy (submit --start, resolved:
# now, best or finish), its run on its best placement in seconds (--run-time) and its longest
# wait for better GPUs in seconds (--max-wait); the scheduler reads them off its workers.
# Pod (template): "true" lets the gang preempt gangs of lower priority (submit --preempt; a
# pod's own preemptionPolicy is PreemptLowerPriority by default in every cluster, so it cannot
# tell an opt-in); "false" under PREEMPTIBLE keeps a gang from ever being a victim.
PREEMPT_ANNOTATION = f"{PREFIX}/preempt"
PREEMPTIBLE_ANNOTATION = f"{PREFIX}/preemptible"
# Pod (template) and MPIJob: the team queue the gang counts against (submit --queue). The queues
# themselves are the ConfigMap QUEUES_CONFIG in SYSTEM_NAMESPACE, one data key per queue (its
# JSON, jobs/queues.py); the scheduler watches it, `ringleader queue` writes it.
QUEUE_ANNOTATION = f"{PREFIX}/queue"
QUEUES_CONFIG = "ringleader-queues"
# Each team queue's fair-share usage, kept by the scheduler in the ConfigMap QUEUE_USAGE_CONFIG
# in SYSTEM_NAMESPACE, one data key per queue: {"gpu_s": GPU-seconds decayed to "as_of", "as_of":
# Unix seconds} (cache.py), so another replica, or the scheduler restarted, orders queues alike.
QUEUE_USAGE_CONFIG = "ringleader-queue-usage"
# Restarts (submit --max-restarts): how often a failed gang is restarted, on its worker template;
# the gang's restart count on its PodGroup, which the scheduler raises and writes on every pod it
# binds (the pods read it into RINGLEADER_RESTARTS through the downward API); on a Node, the
# failures blamed on it (JSON, "namespace/gang#run" -> why) and why ringleader cordoned it.
MAX_RESTARTS_ANNOTATION = f"{PREFIX}/max-restarts"
RESTARTS_ANNOTATION = f"{PREFIX}/restarts"
# On the PodGroup too: how many of those restarts were preemptions (they do not use up --max-restarts).
PREEMPTIONS_ANNOTATION = f"{PREFIX}/preemptions"
# On the PodGroup too: the runs the gang ended by a restart or a preemption, as JSON [[start, end],
# ...] in wall-clock seconds, from its pods' start to their deletion: the GPU service it attained,
# which a queue ordered by least attained service reads (scheduler/order.py).
RUNS_ANNOTATION = f"{PREFIX}/runs"
# On the PodGroup too: where a gang the scheduler moved starts again (a placement's JSON,
# ``Placement.as_dict``), held for it while its pods stop and its controller makes them again;
# removed once it started there or could not. Another replica, or the scheduler restarted, keeps
# holding it.
MOVE_TARGET_ANNOTATION = f"{PREFIX}/move-target"
FAULTS_ANNOTATION = f"{PREFIX}/faults"
CORDON_REASON_ANNOTATION = f"{PREFIX}/cordon-reason"
START_ANNOTATION = f"{PREFIX}/start"
RUN_TIME_ANNOTATION = f"{PREFIX}/run-time-s"
MAX_WAIT_ANNOTATION = f"{PREFIX}/max-wait-s"
RISK_ANNOTATION = f"{PREFIX}/risk"  # how "finish" weighs likely ranges: scheduler.types.RISKS
# What prices a gang's placements where it weighs its start (--model, --calibration: the JSON
# document `ringleader calibrate --out` writes, compact), read off its workers as the above.
MODEL_ANNOTATION = f"{PREFIX}/model"
# How the model trains (JobSpec.training_workload: its flags and DeepSpeed configuration): the
# per-GPU batch, the precision and the micro-batches per optimizer step (gradient accumulation).
BATCH_ANNOTATION = f"{PREFIX}/batch-size"
PRECISION_ANNOTATION = f"{PREFIX}/precision"
ACCUMULATION_ANNOTATION = f"{PREFIX}/accumulation-steps"
CALIBRATION_ANNOTATION = f"{PREFIX}/calibration"
# An annotation the API server takes is at most 256 KiB with all the others; a calibration is a
# few KiB: anything near the limit is refused at submit.
CALIBRATION_MAX_BYTES = 64 * 1024
# The training job object and its PodGroup: the whole job spec as submit prepared it (the codec's
# JSON, jobs/codec.py spec_to_json), secret-looking -e values left out; `get` reads it off the
# job, the scheduler off the PodGroup (the gang's queue, preemption and workload are its, never
# one pod's).
SPEC_ANNOTATION = f"{PREFIX}/spec"
# Pod (template) label: ask for topology-aware placement (arena's --gputopology=true).
TOPOLOGY_LABEL = f"{PREFIX}/gputopology"
JOB_LABEL = f"{PREFIX}/job"

# Gangs: scheduler-plugins' PodGroup, which mpi-operator creates and labels pods with.
PODGROUP_GROUP = "scheduling.x-k8s.io"
PODGROUP_VERSION = "v1alpha1"
PODGROUP_PLURAL = "podgroups"
PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"

# Volcano's HyperNodes (cluster-scoped): the network tree, when the scheduler's config asks for it.
HYPERNODE_GROUP = "topology.volcano.sh"
HYPERNODE_VERSION = "v1alpha1"
HYPERNODE_PLURAL = "hypernodes"

MPIJOB_GROUP = "kubeflow.org"
MPIJOB_VERSION = "v2beta1"
MPIJOB_PLURAL = "mpijobs"
# Kubeflow's Training Operator (submit pytorch).
PYTORCHJOB_GROUP = "kubeflow.org"
PYTORCHJOB_VERSION = "v1"
PYTORCHJOB_PLURAL = "pytorchjobs"
# The training jobs `submit` makes, by kind: (group, version, plural); what operator makes their pods.
TRAINING_JOBS = {"MPIJob": (MPIJOB_GROUP, MPIJOB_VERSION, MPIJOB_PLURAL),
                 "PyTorchJob": (PYTORCHJOB_GROUP, PYTORCHJOB_VERSION, PYTORCHJOB_PLURAL)}  # fmt: skip
OPERATORS = {"MPIJob": "mpi-operator", "PyTorchJob": "Kubeflow's Training Operator"}
# mpi-operator's pod labels (training.kubeflow.org/job-role: launcher | worker).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
# The Training Operator's (PyTorchJob): master | worker, in lower case.
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
# An Indexed Job's pod: its completion index (label from Kubernetes 1.28, annotation before); under
# a JobSet (and Kubeflow Trainer's TrainJob) also its Job's index among all the JobSet's Jobs.
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
JOBSET_GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

# -- GPU delivery (docs/kubernetes.md, "How the GPUs reach the container") --
# env: the worker's NVIDIA_VISIBLE_DEVICES from its gpu-ids annotation, run by the NVIDIA
# container runtime that this RuntimeClass names (GPU Operator's default name; with CDI on, from
# v25.10, it is no longer the node's default runtime, so pods must name it).
DEFAULT_RUNTIME_CLASS = "nvidia"
# dra: kube-scheduler binds, NVIDIA's DRA driver prepares the devices ringleader allocated.
DELIVERIES = ("env", "dra")
DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"  # ResourceClaims, ResourceSlices
DRA_DRIVER = "gpu.nvidia.com"  # the driver's name, its DeviceClass's name and its attributes' domain
DRA_DEVICE_CLASS = "gpu.nvidia.com"
DRA_REQUEST = "gpus"  # the claim's one request, and the pod's claim entry
GANG_GATE = f"{PREFIX}/gang"  # schedulingGate on DRA workers, removed once the whole gang is pinned
# Pod (DRA worker template): how many GPUs its claim asks for, so the scheduler counts a DRA
# worker's GPUs as it counts a ringleader.io/gpu request (its claim is not on the pod).
DRA_GPUS_ANNOTATION = f"{PREFIX}/dra-gpus"
# Install: which delivery the cluster uses, readable by every authenticated user (one ConfigMap).
CLUSTER_CONFIG = "ringleader-cluster"
