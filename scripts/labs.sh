#!/usr/bin/env bash
# The two labs the bench kit reproduces, each end to end in one command, written under OUT
# (examples/labs/ holds this machine's outputs; `make lab-horovod` and `make lab-dli` remake them):
#   scripts/labs.sh horovod OUT   Horovod lab 7: the experiment-environment table, the scaling
#                                 table (backend x workers, each point the median of 3 runs),
#                                 speedup and busbw plots, report.html. NCCL rows are skipped,
#                                 with the reason, where there is no CUDA. As root, also its
#                                 second table (servers x ranks per server, OUT/servers/) on an
#                                 emulated two-node cluster (`ringleader cluster up`), taken
#                                 down after.
#   scripts/labs.sh dli OUT       the DLI data-pipeline lab: JPEGs written (then removed), and per
#                                 model the loader alone, compute only (synthetic data) and the
#                                 full pipeline, degradation and the bandwidth a GPU needs; the
#                                 study's table (pipeline.md) and the lab's two plots.
# Sized for a 2-core machine without GPUs (a few minutes each); the labs' own sizes are the
# commands' defaults.
set -euo pipefail
usage="usage: scripts/labs.sh horovod|dli OUT"
lab=${1:?$usage}
out=${2:?$usage}
mkdir -p "$out"
case "$lab" in
  horovod)
    ringleader env > "$out/env.txt"
    ringleader bench scaling --backends gloo,mpi,nccl --workers 1,2 --model alexnet --image-size 64 \
      --batch-size 16 --num-batches 30 --repeat 3 --launcher local --out "$out" > "$out/scaling.txt"
    if [ "$(id -u)" -ne 0 ]; then
      echo "note: the servers x ranks-per-server table needs root (an emulated cluster); not made" >&2
    else
      # The reference study's two 8-GPU servers, emulated: links scaled with the CPU's compute
      # (docs/hosts.md); each rank asks for 8 / ranks-per-server GPU ids, so placement puts that
      # many on each server. A folder of its own, so no job or cluster of the caller's is touched.
      RINGLEADER_HOME=$(mktemp -d)
      export RINGLEADER_HOME
      trap 'ringleader cluster down > /dev/null; rm -rf "$RINGLEADER_HOME"' EXIT
      mkdir -p "$out/servers"
      ringleader cluster up -f examples/seeds-cluster.yaml > "$out/servers/cluster.txt"
      ringleader bench scaling --backends gloo,mpi,nccl --workers 1,2 --servers 1,2 --model alexnet \
        --image-size 64 --batch-size 16 --num-batches 10 --repeat 3 --no-busbw --launcher runtime \
        --out "$out/servers" > "$out/servers/scaling.txt"
    fi
    ;;
  dli)
    data=$(mktemp -d)
    trap 'rm -rf "$data"' EXIT
    ringleader data synth --out "$data" --images 512 --size 160 --classes 8 > /dev/null
    for model in alexnet googlenet resnet50; do
      ringleader bench pipeline --model "$model" --data "$data" --image-size 64 --batch-size 16 \
        --num-batches 20 --num-warmup-batches 3 --repeat 3 --launcher local --out "$out"
    done > "$out/pipeline.txt"
    ;;
  *)
    echo "$usage" >&2
    exit 2
    ;;
esac
echo "wrote $out"
