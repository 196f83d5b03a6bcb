#!/usr/bin/env bash
# Racks measured: 2 racks x 2 nodes (one V100 each, 25 Gb/s) under one spine, each rack's uplink
# oversubscribed 4:1, emulated on this box (`cluster up` builds a bridge per switch, the rack
# uplinks shaped with tc). The same 2-worker VGG16 gradient exchange (RINGLEADER_RACKS_MODEL picks
# another model's gradients) runs inside one rack, then across the racks; measured images/s and
# their ratio beside the model calibrated on the rack.
# Root only (network namespaces, bridges, tc); `make demo` runs it after the reference study.
set -euo pipefail
cd "$(dirname "$0")/.."
export RINGLEADER_HOME="${RINGLEADER_RACKS_HOME:-$PWD/.demo/racks-home}"
# Links at network_gbps x SCALE: a node's 25 Gb/s -> 1 Gb/s, a rack's uplink 50/4 Gb/s -> 0.5 Gb/s.
SCALE="${RINGLEADER_DEMO_SCALE:-0.04}"
OUT="${RINGLEADER_RACKS_OUT:-$PWD/.demo/racks-results}"
MODEL="${RINGLEADER_RACKS_MODEL:-vgg16}"  # whose gradients the job exchanges (reference tables)

section() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

if [ -d "$RINGLEADER_HOME/emulation" ]; then ringleader cluster down >/dev/null || true; fi
rm -rf "$RINGLEADER_HOME" "$OUT"
mkdir -p "$RINGLEADER_HOME" "$OUT"

job=(python3 examples/jobs/vgg16_exchange.py --model "$MODEL" --batch-size 64 --steps 3 --warmup 1)
bench=(ringleader bench allreduce -b 8M -e 32M -f 2 -n 5 -w 1 -c 0 -o json)

section "2 racks x 2 nodes, rack uplinks 4:1, emulated: a bridge per rack and one for the spine, links x $SCALE"
trap 'section "Remove the emulated racks"; ringleader cluster down' EXIT
run ringleader cluster up -f examples/racks-cluster.yaml --scale "$SCALE"
echo "(each node's link: 25 Gb/s x $SCALE; each rack's uplink to the spine: 2 x 25 Gb/s / 4 x $SCALE)"

section "Inside one rack: topology-aware placement keeps a 2-node gang under one leaf"
run ringleader submit mpi --name bench-rack --workers 2 --gpus 1 --gputopology -- "${bench[@]}"
ringleader logs -f bench-rack >/dev/null
run ringleader submit mpi --name "$MODEL-in-rack" --workers 2 --gpus 1 --gputopology --model "$MODEL" -- "${job[@]}"
run ringleader logs -f --tail 1 "$MODEL-in-rack"

section "Across the racks: one node per rack left to topology jobs, so the gang crosses both uplinks"
run ringleader node label node-1 gpu-schedule=default
run ringleader node label node-3 gpu-schedule=default
run ringleader submit mpi --name "$MODEL-across-racks" --workers 2 --gpus 1 --gputopology --model "$MODEL" -- "${job[@]}"
run ringleader get "$MODEL-across-racks"
run ringleader logs -f --tail 1 "$MODEL-across-racks"

section "Calibrate the model on one rack's link, then predict both placements"
run python benchmarks/hosts_placement.py extract --out "$OUT" bench-rack
run ringleader calibrate "$OUT/bench-rack.json" --out "$OUT/calibration.json"
run python benchmarks/hosts_placement.py racks --in-rack "$MODEL-in-rack" --across "$MODEL-across-racks" \
  --calibration "$OUT/calibration.json" || true
