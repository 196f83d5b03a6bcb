"""Benchmarks: one communication layer over gloo, nccl and MPI, and the allreduce, train,
pipeline and scaling benches built on it. Heavy imports (torch, mpi4py, matplotlib) happen
inside the functions that need them, so importing this package stays cheap."""

BACKENDS = ("gloo", "mpi", "nccl")
# Horovod itself (horovod.torch under horovodrun): a training backend of `bench scaling`, beside
# ringleader's own gloo/mpi/nccl, as Horovod's lab compares them; not a collective of its own.
HOROVOD = "horovod"
TRAIN_BACKENDS = (*BACKENDS, HOROVOD)
