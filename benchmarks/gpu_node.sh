#!/usr/bin/env bash
# The checks that need a real GPU, run on one GPU machine: NVML discovery of the local node, the
# embedded engine giving a job its GPU (CUDA_VISIBLE_DEVICES as the job sees it), bench train
# over NCCL in both layouts against the model's prediction, and bench allreduce over NCCL on one
# rank.
# Usage: bash benchmarks/gpu_node.sh OUT_DIR   (ringleader importable: installed, or PYTHONPATH=src)
set -uo pipefail
out=${1:?usage: gpu_node.sh OUT_DIR}
mkdir -p "$out"
export RINGLEADER_HOME=$(mktemp -d)
rl() { python3 -m ringleader.cli.main "$@"; }
step() { echo; echo "## $*"; }
{
  step "machine"; date -u; nvidia-smi -L; nvidia-smi topo -m; uptime
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  step "local node from NVML"; rl top node -d; rl topo local
  step "a 1-GPU job on the embedded engine"
  rl submit mpi --name gpujob --workers 1 --gpus 1 -- python3 -c \
    'import os, torch; print("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"), "RANK", os.environ.get("RANK"), "device", torch.cuda.get_device_name(0), "count", torch.cuda.device_count()); x = torch.ones(1 << 20, device="cuda"); print("sum", float(x.sum()))'
  timeout 120 python3 -m ringleader.cli.main logs -f gpujob >/dev/null
  rl get gpujob; rl logs gpujob
  step "a torchrun line over NCCL (DDP) and a shell line on the embedded engine"
  cat > "$out/ddp_nccl.py" <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1024, 1024).cuda(), device_ids=[0])
model(torch.randn(64, 1024, device="cuda")).sum().backward()
t = torch.ones(1 << 20, device="cuda")
dist.all_reduce(t)
print("rank", dist.get_rank(), "of", dist.get_world_size(), "allreduce", float(t[0]), "nccl", torch.cuda.nccl.version(),
      "LOCAL_RANK", os.environ["LOCAL_RANK"], "CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
dist.destroy_process_group()
PY
  rl submit mpi --name ddp --workers 1 --gpus 1 -- torchrun --nnodes=1 --nproc-per-node=1 "$out/ddp_nccl.py"
  timeout 120 python3 -m ringleader.cli.main logs -f ddp >/dev/null
  rl get ddp -e; rl logs ddp
  rl submit mpi --name shell --workers 1 --gpus 1 'echo visible=$CUDA_VISIBLE_DEVICES rank=$RANK && nvidia-smi -L | wc -l'
  timeout 60 python3 -m ringleader.cli.main logs -f shell >/dev/null
  rl get shell; rl logs shell
  step "GPU utilization of a running job: get -g and top job NAME"
  rl submit mpi --name busy --workers 1 --gpus 1 -- python3 -c \
    'import time, torch; a = torch.randn(8192, 8192, device="cuda"); end = time.time() + 25
while time.time() < end: a = (a @ a).clamp_(-1, 1)
torch.cuda.synchronize()'
  sleep 10
  rl get busy -g; rl top job busy; rl get busy -g -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["gpu_usage"])'
  timeout 60 python3 -m ringleader.cli.main logs -f busy >/dev/null; rl get busy -g | tail -3
  step "bench train over NCCL, one rank, and the model's prediction"
  # NHWC: the channels-last layout of tuned mixed-precision recipes, beside PyTorch's default NCHW
  for layout in NCHW NHWC; do
    for prec in fp32 fp16; do
      rl bench train --model resnet50 --batch-size 64 --num-batches 30 --precision $prec --data-format $layout \
        --backend nccl -np 1 -o json > "$out/train-resnet50-$prec-$layout.json"
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in d if "images" in k or k in ("step_time_s","device","data_format")})' "$out/train-resnet50-$prec-$layout.json" $prec
    done
  done
  for prec in fp32 fp16; do
    rl predict --model resnet50 --batch-size 64 --workers 1 --gpus 1 --gpu-type H100 --precision $prec
  done
  step "bench allreduce over NCCL, one rank"
  rl bench allreduce --backend nccl -np 1 -b 1M -e 256M -f 4
} 2>&1 | tee "$out/gpu_node.txt"
