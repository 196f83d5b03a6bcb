#!/usr/bin/env bash
# The two labs the bench kit reproduces, each end to end in one command, written under OUT
# (examples/labs/ holds this machine's outputs; `make lab-horovod` and `make lab-dli` remake them):
#   scripts/labs.sh horovod OUT   Horovod lab 7: Horovod's own build check (horovodrun
#                                 --check-build), the experiment-environment table, the scaling
#                                 table (backend x workers: ringleader's gloo, MPI and NCCL beside
#                                 Horovod itself under horovodrun, each point the median of 3 runs),
#                                 speedup and busbw plots, report.html. NCCL rows are skipped,
#                                 with the reason, where there is no CUDA; horovod's where it is not
#                                 installed (`make lab-horovod` installs it). As root, also its
#                                 second table (servers x ranks per server, OUT/servers/) on an
#                                 emulated two-node cluster (`ringleader cluster up`), taken
#                                 down after.
#   scripts/labs.sh dli OUT       the DLI data-pipeline lab, both halves: per model (GoogLeNet,
#                                 ResNet-50, ResNet-152, AlexNet) the loader alone, compute only
#                                 (synthetic data) and the full pipeline (OUT/models/); then the
#                                 trivial model's pipeline made worse step by step as the lab does
#                                 (one reader, the exact JPEG decode, both, complex and simple
#                                 augmentation; OUT/steps/). Each a table (pipeline.md) and the lab's
#                                 two plots; the JPEGs are written first and removed after.
# Sized for a 2-core machine without GPUs (minutes each; examples/labs/README.md gives the sizes
# against the labs' own and the times); the labs' own sizes are the commands' defaults.
set -euo pipefail
usage="usage: scripts/labs.sh horovod|dli OUT"
lab=${1:?$usage}
out=${2:?$usage}
mkdir -p "$out"
case "$lab" in
  horovod)
    if command -v horovodrun > /dev/null; then
      horovodrun --check-build > "$out/horovod-build.txt"
    fi
    ringleader env > "$out/env.txt"
    # The lab's own example model (pytorch_mnist_horovod.py), so Horovod's rows take minutes here
    ringleader bench scaling --backends gloo,mpi,nccl,horovod --workers 1,2 --model mnist --batch-size 32 \
      --num-batches 10 --num-warmup-batches 2 --repeat 3 --launcher local --out "$out" > "$out/scaling.txt"
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
        --image-size 64 --batch-size 16 --num-batches 5 --num-warmup-batches 2 --repeat 3 --no-busbw \
        --launcher runtime --out "$out/servers" > "$out/servers/scaling.txt"
    fi
    ;;
  dli)
    data=$(mktemp -d)
    trap 'rm -rf "$data"' EXIT
    ringleader data synth --out "$data" --images 128 --size 160 --classes 8 > /dev/null
    mkdir -p "$out/models" "$out/steps"
    # One OpenMP thread for training: the loader's processes need the other core, and a rank
    # whose threads wait on each other on busy cores stepped 25-50x slower (docs/bench.md).
    export OMP_NUM_THREADS=1
    size=(--data "$data" --image-size 64 --repeat 2 --launcher local)
    # Part 1, the lab's models in its order: compute only vs the full pipeline.
    for model in googlenet resnet50 resnet152 alexnet; do
      ringleader bench pipeline --model "$model" "${size[@]}" --batch-size 4 --num-batches 4 \
        --num-warmup-batches 1 --decode fast --out "$out/models"
    done > "$out/models/pipeline.txt"
    # Part 2, the trivial model (the pipeline is all there is to measure), made worse as the lab
    # does: its reference (several readers, the fast JPEG decode), one reader, the exact decode,
    # both, then complex (a vertical flip more) and simple (no horizontal flip) augmentation.
    steps=(
      "reference --loader-workers 2 --decode fast --augment standard"
      "1-reader --loader-workers 1 --decode fast --augment standard"
      "accurate-decode --loader-workers 2 --decode accurate --augment standard"
      "1-reader-accurate-decode --loader-workers 1 --decode accurate --augment standard"
      "complex-augment --loader-workers 2 --decode fast --augment complex"
      "simple-augment --loader-workers 2 --decode fast --augment simple"
    )
    for step in "${steps[@]}"; do
      read -r label flags <<< "$step"
      # shellcheck disable=SC2086 # the step's flags, split on purpose
      ringleader bench pipeline --model trivial "${size[@]}" --batch-size 16 --num-batches 8 \
        --num-warmup-batches 1 --label "$label" $flags --out "$out/steps"
    done > "$out/steps/pipeline.txt"
    ;;
  *)
    echo "$usage" >&2
    exit 2
    ;;
esac
echo "wrote $out"
