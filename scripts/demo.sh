#!/usr/bin/env bash
# The main scenario: the reference study's cluster (2 x 8 V100, 25 Gb/s) emulated on this box —
# a network namespace with its own sshd per node, links shaped with tc — and its 4-worker VGG16
# job run there with and without --gputopology: measured images/s beside the predicted ones; then
# racks (scripts/racks_demo.sh): a 2-node gang inside one rack and across 4:1 oversubscribed ones.
# Without root (or iproute2 / sshd) it says why and runs the placement on processes of this host.
set -euo pipefail
cd "$(dirname "$0")/.."
export RINGLEADER_HOME="${RINGLEADER_HOME:-$PWD/.demo/home}"
# Links at network_gbps x SCALE: 25 Gb/s -> 1 Gb/s, so that a 2-core box computes fast enough for
# the network to matter (the allreduce of VGG16's 553 MB then takes ~14 s across nodes, ~2.5 s
# inside one node), and the whole demo stays within about three minutes.
SCALE="${RINGLEADER_DEMO_SCALE:-0.04}"
OUT="$PWD/.demo/results"

section() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

why_not_emulated() {
  if [ "$(id -u)" != 0 ]; then echo "not root (network namespaces, a bridge and tc need root)"; return; fi
  local tool
  for tool in ip tc ssh ssh-keygen /usr/sbin/sshd mpirun; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (make setup installs iproute2, openssh-server, openmpi-bin)"; return; }
  done
}

# A previous run's cluster is taken down before its home (and its record of what to remove) goes.
if [ -d "$RINGLEADER_HOME/emulation" ]; then ringleader cluster down >/dev/null || true; fi
rm -rf "$RINGLEADER_HOME" "$OUT"
mkdir -p "$RINGLEADER_HOME" "$OUT"

emulated_demo() {
  local job=(python3 examples/jobs/vgg16_exchange.py --batch-size 64 --steps 3 --warmup 1)
  local bench=(ringleader bench allreduce -b 8M -e 32M -f 2 -n 5 -w 1 -c 0 -o json)

  section "The reference study's cluster, emulated: 2 nodes x 8 V100, 25 Gb/s network, links scaled x $SCALE"
  trap 'section "Remove the emulated cluster"; ringleader cluster down' EXIT
  run ringleader cluster up -f examples/seeds-cluster.yaml --scale "$SCALE"
  echo "(each node: its own network namespace, hostname and sshd; its link shaped with tc tbf to"
  echo " 25 Gb/s x $SCALE = $(python3 -c "print(f'{25 * $SCALE:g}')") Gb/s. Ranks start over ssh through mpirun, as on real hosts.)"
  run ringleader topo cn-shanghai-172

  section "Where the 4 workers would go, with and without --gputopology (dry run: nothing starts)"
  run ringleader submit mpi --name pytorch-topo-4-vgg16 --gpus 1 --workers 4 --gputopology=true --model vgg16 --dry-run -- "${job[@]}"
  run ringleader submit mpi --name pytorch-4-vgg16 --gpus 1 --workers 4 --model vgg16 --dry-run -- "${job[@]}"

  section "Default scheduling: 2 + 2 workers over both nodes; every allreduce crosses the 1 Gb/s links"
  echo "(the job: per step a fixed compute wait (a V100's VGG16 step), then a gloo allreduce of VGG16's 138 M gradients)"
  run ringleader submit mpi --name pytorch-4-vgg16 --gpus 1 --workers 4 --model vgg16 -- "${job[@]}"
  run ringleader get pytorch-4-vgg16
  run ringleader logs -f --tail 1 pytorch-4-vgg16
  echo "(then the link it crossed, measured: bench allreduce with 1 rank on each node)"
  run ringleader submit mpi --name bench-network --workers 2 --gpus 8 -- "${bench[@]}"
  ringleader logs -f bench-network >/dev/null

  section "Topology-aware: the 4 workers on one node's NVLinked quad; the allreduce stays inside the node"
  run ringleader submit mpi --name pytorch-topo-4-vgg16 --gpus 1 --workers 4 --gputopology=true --model vgg16 -- "${job[@]}"
  run ringleader top node -d cn-shanghai-172
  run ringleader logs -f --tail 1 pytorch-topo-4-vgg16
  echo "(then the path it used, measured right after: bench allreduce with 4 ranks on one node)"
  run ringleader submit mpi --name bench-node --workers 4 --gpus 1 --gputopology -- "${bench[@]}"
  ringleader logs -f bench-node >/dev/null
  run ringleader list

  section "Calibrate the model on the emulated cluster from the two bench runs"
  run python benchmarks/hosts_placement.py extract --out "$OUT" bench-network bench-node
  run ringleader calibrate "$OUT/bench-network.json" "$OUT/bench-node.json" --out "$OUT/calibration.json"

  section "Measured vs predicted images/s (links x $SCALE here: compare ratios, not images/s)"
  run python benchmarks/hosts_placement.py report --default pytorch-4-vgg16 --topology pytorch-topo-4-vgg16 \
    --calibration "$OUT/calibration.json" || true
  section "Remove the emulated cluster"
  trap - EXIT
  run ringleader cluster down

  # Beside it, the network above the nodes: the same exchange in one rack and across two racks
  # whose uplinks are oversubscribed 4:1 (a bridge per rack, the uplinks shaped: about 2 minutes).
  bash scripts/racks_demo.sh
}

# Without root: the placement, run for real on processes of this host (both runs measure the same).
fallback_demo() {
  # The reference study's mpirun line, with its tf_cnn_benchmarks workload swapped for ringleader's
  # own tf_cnn_benchmarks-style trainer (its interface pins to eth0 dropped: all ranks are local).
  local workload=(mpirun --allow-run-as-root -np 4 -bind-to none -map-by slot -x NCCL_DEBUG=INFO -x PATH
    --mca pml ob1 --mca btl ^openib
    python -m ringleader.cli.main bench train --model trivial --batch-size 64 --num-batches 30 --backend mpi)

  section "The reference study's cluster: 2 nodes x 8 V100 (NVLink hybrid cube mesh), emulated on this host"
  run ringleader cluster apply -f examples/seeds-cluster.yaml
  run ringleader topo cn-shanghai-172

  section "Where the 4 workers would go, with and without --gputopology (dry run: nothing starts)"
  run ringleader submit mpi --name tensorflow-topo-4-vgg16 --gpus 1 --workers 4 --gputopology=true --model vgg16 --dry-run "${workload[*]}"
  run ringleader submit mpi --name tensorflow-4-vgg16 --gpus 1 --workers 4 --model vgg16 --dry-run "${workload[*]}"

  section "Submit both for real (default first, so it gets the 2+2 spread of the reference study)"
  run ringleader submit mpi --name tensorflow-4-vgg16 --gpus 1 --workers 4 --model vgg16 -- "${workload[@]}"
  run ringleader submit mpi --name tensorflow-topo-4-vgg16 --gpus 1 --workers 4 --gputopology=true --model vgg16 -- "${workload[@]}"

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
}

reason="$(why_not_emulated)"
if [ -z "$reason" ]; then
  emulated_demo
else
  echo "note: no emulated cluster: $reason; running the placement on processes of this host instead"
  fallback_demo
fi
