"""Benchmarks: one communication layer over gloo, nccl and MPI, and the allreduce, train,
pipeline and scaling benches built on it. Heavy imports (torch, mpi4py, matplotlib) happen
inside the functions that need them, so importing this package stays cheap."""

BACKENDS = ("gloo", "mpi", "nccl")
