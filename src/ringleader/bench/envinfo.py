"""`ringleader env`: the labs' experiment-environment table (hardware and software)."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any

from ringleader.topology.nvml import discover

PACKAGES = ("torch", "numpy", "pillow", "mpi4py", "matplotlib", "nvidia-ml-py", "ringleader")


def _nics() -> str:
    """The network cards: interfaces backed by a device (a PCI or virtio function), never the
    kernel's virtual ones (lo, veth, bridges, docker0, tun, ifb, dummy: /sys/devices/virtual),
    whatever they are named; those are named apart when they are all there is (a container)."""
    out, virtual = [], []
    base = Path("/sys/class/net")
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        if not (dev / "device").exists():
            virtual += [] if dev.name == "lo" else [dev.name]
            continue
        driver = dev / "device" / "driver"
        drv = os.path.basename(os.readlink(driver)) if driver.is_symlink() else "driver n/a"
        try:
            speed = int((dev / "speed").read_text().strip())
            if speed <= 0:
                raise ValueError(speed)
            spd = f"{speed // 1000} Gb/s" if speed >= 1000 else f"{speed} Mb/s"
        except (OSError, ValueError):
            spd = "speed n/a"
        out.append(f"{dev.name} ({drv}, {spd})")
    if out:
        return f"{len(out)}: " + ", ".join(out)
    return f"none found (virtual only: {', '.join(virtual)})" if virtual else "none found"


def _os() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return f"{line.split('=', 1)[1].strip(chr(34))}, kernel {platform.release()}"
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}"


def _mpi() -> str:
    exe = shutil.which("mpirun")
    if not exe:
        return "not installed (apt-get install openmpi-bin libopenmpi-dev)"
    try:
        proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20,
                              check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"mpirun found, version unknown ({exc})"
    first = (proc.stdout or proc.stderr).strip().splitlines()
    return first[0] if first else "mpirun found, version unknown"


def _gpus() -> tuple[str, str, str]:
    d = discover()
    topo = d.topology
    if topo.n_gpus == 0:
        return "none", d.reason or "no GPUs", "n/a"
    kinds: Counter[str] = Counter()
    for i in range(topo.n_gpus):
        for j in range(i + 1, topo.n_gpus):
            kinds[str(topo.link(i, j))] += 1
    conn = ", ".join(f"{k} x{n} pairs" for k, n in sorted(kinds.items())) or "single GPU"
    return str(topo.gpu_model), str(topo.n_gpus), conn


def _driver() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return "n/a (no NVIDIA driver or NVML)"


def _torch() -> tuple[str, str, str]:
    try:
        import torch
    except ImportError:
        return "torch not installed", "n/a", "n/a"
    cuda = torch.version.cuda or "none (CPU build of torch)"
    nccl = "n/a (no CUDA)"
    if torch.cuda.is_available():
        try:
            nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:
            nccl = "unknown"
    return f"PyTorch {torch.__version__}", cuda, nccl


def collect() -> dict[str, Any]:
    model, count, conn = _gpus()
    framework, cuda, nccl = _torch()
    pkgs = {}
    for name in PACKAGES:
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pkgs[name] = "not installed"
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "servers": 1, "hostname": socket.gethostname(), "cpu": f"{cpu} x{os.cpu_count()}",
        "nics": _nics(), "gpu_model": model, "gpu_count": count, "gpu_connection": conn,
        "os": _os(), "gpu_driver": _driver(), "cuda": cuda, "nccl": nccl, "mpi": _mpi(),
        "framework": framework, "python": platform.python_version(), "packages": pkgs,
    }  # fmt: skip


def rows(info: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(section, item, value) rows in the order of the labs' table."""
    pk = ", ".join(f"{k} {v}" for k, v in info["packages"].items())
    return [
        ("hardware", "servers", f"{info['servers']} ({info['hostname']})"),
        ("hardware", "CPU", info["cpu"]),
        ("hardware", "NICs (model, count)", info["nics"]),
        ("hardware", "GPU model, count", f"{info['gpu_model']}, {info['gpu_count']}"),
        ("hardware", "GPU connection", info["gpu_connection"]),
        ("software", "OS", info["os"]),
        ("software", "GPU driver", info["gpu_driver"]),
        ("software", "framework, python packages", f"{info['framework']}; python "
                                                   f"{info['python']}; {pk}"),
        ("software", "CUDA", info["cuda"]),
        ("software", "NCCL", info["nccl"]),
        ("software", "MPI", info["mpi"]),
    ]  # fmt: skip
