#!/usr/bin/env bash
# The main scenario: the reference study's cluster and job, placed with and without topology
# awareness, run for real on emulated nodes; then a real 2-worker torch.distributed job.
set -euo pipefail
cd "$(dirname "$0")/.."
export RINGLEADER_HOME="${RINGLEADER_HOME:-$PWD/.demo/home}"
rm -rf "$RINGLEADER_HOME"
mkdir -p "$RINGLEADER_HOME"

section() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

section "The reference study's cluster: 2 nodes x 8 V100 (NVLink hybrid cube mesh), emulated on this host"
run ringleader cluster apply -f examples/seeds-cluster.yaml
run ringleader topo cn-shanghai-172

# The reference study's mpirun line, with its tf_cnn_benchmarks workload swapped for ringleader's
# own tf_cnn_benchmarks-style trainer (its interface pins to eth0 dropped: all ranks are local).
workload=(mpirun --allow-run-as-root -np 4 -bind-to none -map-by slot -x NCCL_DEBUG=INFO -x PATH
  --mca pml ob1 --mca btl ^openib
  python -m ringleader.cli.main bench train --model trivial --batch-size 64 --num-batches 30 --backend mpi)

section "Where the 4 workers would go, with and without --gputopology (dry run: nothing starts)"
run ringleader submit mpi --name tensorflow-topo-4-vgg16 --gpus 1 --workers 4 --gputopology=true --model vgg16 --dry-run "${workload[*]}"
run ringleader submit mpi --name tensorflow-4-vgg16 --gpus 1 --workers 4 --model vgg16 --dry-run "${workload[*]}"

section "Submit both for real (default first, so it gets the 2+2 spread of the reference study)"
run ringleader submit mpi --name tensorflow-4-vgg16 --gpus 1 --workers 4 --model vgg16 \
  --image registry.cn-hangzhou.aliyuncs.com/kubernetes-image-hub/tensorflow-benchmark:tf2.3.0-py3.7-cuda10.1 \
  -- "${workload[@]}"
run ringleader submit mpi --name tensorflow-topo-4-vgg16 --gpus 1 --workers 4 --gputopology=true --model vgg16 \
  --image registry.cn-hangzhou.aliyuncs.com/kubernetes-image-hub/tensorflow-benchmark:tf2.3.0-py3.7-cuda10.1 \
  -- "${workload[@]}"

section "What runs where"
run ringleader top node -d
run ringleader get tensorflow-4-vgg16
run ringleader get tensorflow-topo-4-vgg16

section "Follow both to the end"
echo "(The emulated nodes share this host's cores, so both runs measure the same here; the"
echo " Prediction lines above say what each placement buys on the real 2 x 8 V100 cluster.)"
run ringleader logs -f --tail 6 tensorflow-4-vgg16
run ringleader logs -f --tail 6 tensorflow-topo-4-vgg16
run ringleader list

section "A real 2-worker torch.distributed (gloo) job, torchrun-style, on one node's NV2 pair"
run ringleader submit mpi --name ddp-gloo --workers 2 --gpus 1 --gputopology -- python examples/jobs/torch_gloo.py
run ringleader logs -f ddp-gloo
run ringleader get ddp-gloo -e
