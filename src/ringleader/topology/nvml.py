"""Discover the local GPUs and their links through NVML (package nvidia-ml-py)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from ringleader.topology.links import SELF, Link
from ringleader.topology.node import EMPTY, NodeTopology
from ringleader.topology.smi import render_topo_text

# nvmlDeviceGetTopologyCommonAncestor levels -> `nvidia-smi topo -m` kinds.
_LEVEL_TO_KIND = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


@dataclass(frozen=True)
class Discovery:
    """What NVML found: a topology (possibly empty) and, when empty, why."""

    topology: NodeTopology
    gpu_uuids: tuple[str, ...]
    reason: str = ""


def discover() -> Discovery:
    """Local GPUs, or an empty topology and a message saying why there are none."""
    try:
        import pynvml
    except ImportError:
        return Discovery(EMPTY, (), "NVML not available (pip install 'ringleader[nvml]'); no GPUs used")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return Discovery(EMPTY, (), f"no NVIDIA driver found ({exc}); running CPU jobs only")
    try:
        return _read(pynvml)
    finally:
        pynvml.nvmlShutdown()


def _read(nvml: Any) -> Discovery:
    count = nvml.nvmlDeviceGetCount()
    if count == 0:
        return Discovery(EMPTY, (), "NVML reports 0 GPUs; running CPU jobs only")
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    bus_ids = [_bus_id(nvml.nvmlDeviceGetPciInfo(h)) for h in handles]
    nvlinks = _nvlink_counts(nvml, handles, bus_ids)
    rows = []
    for i in range(count):
        row = []
        for j in range(count):
            if i == j:
                row.append(SELF)
            elif nvlinks.get((min(i, j), max(i, j))):
                row.append(Link("NV", nvlinks[(min(i, j), max(i, j))]))
            else:
                level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                row.append(Link(_LEVEL_TO_KIND.get(int(level), "SYS")))
        rows.append(tuple(row))
    name = nvml.nvmlDeviceGetName(handles[0])
    name = name.decode() if isinstance(name, bytes) else str(name)
    uuids = []
    for h in handles:
        uuid = nvml.nvmlDeviceGetUUID(h)
        uuids.append(uuid.decode() if isinstance(uuid, bytes) else str(uuid))
    return Discovery(NodeTopology(links=tuple(rows), gpu_model=short_model(name), source="nvml"), tuple(uuids))


def _bus_id(pci: Any) -> str:
    raw = pci.busId
    return (raw.decode() if isinstance(raw, bytes) else str(raw)).lower()


def _nvlink_counts(nvml: Any, handles: list[Any], bus_ids: list[str]) -> dict[tuple[int, int], int]:
    """NVLinks per GPU pair. A link whose far end is not a GPU goes to an NVSwitch: every two
    GPUs on the switch fabric then share min(their switch links)."""
    index = {b[-12:]: i for i, b in enumerate(bus_ids)}
    direct: dict[tuple[int, int], int] = {}
    to_switch = [0] * len(handles)
    for i, h in enumerate(handles):
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if nvml.nvmlDeviceGetNvLinkState(h, link) != 1:
                    continue
                remote = _bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link))[-12:]
            except Exception:
                break
            j = index.get(remote)
            if j is None:
                to_switch[i] += 1
            elif i < j:
                direct[(i, j)] = direct.get((i, j), 0) + 1
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            if to_switch[i] and to_switch[j]:
                direct[(i, j)] = direct.get((i, j), 0) + min(to_switch[i], to_switch[j])
    return direct


def short_model(name: str) -> str:
    for model in ("H200", "H100", "A100", "V100", "A10", "L40", "T4"):
        if model in name:
            return model
    return name


def gpu_usage() -> dict[int, tuple[float, float, float]]:
    """Every local GPU's (duty cycle %, memory used MiB, memory total MiB), by index: NVML, else
    `nvidia-smi --query-gpu`; empty where neither answers (no GPU, no driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no package, no driver: nvidia-smi may still answer
        return parse_usage_csv(_smi_usage())
    try:
        out = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            out[i] = (float(util.gpu), mem.used / 2**20, mem.total / 2**20)
        return out
    except Exception:
        return parse_usage_csv(_smi_usage())
    finally:
        pynvml.nvmlShutdown()


USAGE_QUERY = ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total",
               "--format=csv,noheader,nounits"]  # fmt: skip


def _smi_usage() -> str:
    try:
        return subprocess.run(USAGE_QUERY, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def parse_usage_csv(text: str) -> dict[int, tuple[float, float, float]]:
    """`nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total` CSV (no header,
    no units) by index; a row it cannot read ("[N/A]", a short line) is left out."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        try:
            index, util, used, total = int(cells[0]), float(cells[1]), float(cells[2]), float(cells[3])
        except (ValueError, IndexError):
            continue
        out[index] = (util, used, total)
    return out


# What "unhealthy" means for a GPU, read on demand (no event listener runs between looks):
# NVML cannot give a handle or answer for it (lost from the bus, "GPU requires reset"), it has
# retired pages pending (Volta and older: a reset is needed to retire them), or row remapping
# failed or waits for a reset (Ampere and newer). Xid events are not counted: NVML reports them
# only to a listener registered before they happen, as the device plugin keeps one.
HEALTH_QUERY = ["nvidia-smi", "--query-gpu=index,retired_pages.pending,remapped_rows.pending,remapped_rows.failure",
                "--format=csv,noheader"]  # fmt: skip
HEALTH_FROM = "NVML, else nvidia-smi: lost GPUs, retired pages pending, row remapping failed or pending"


def unhealthy_gpus(expected: int) -> int | None:
    """How many of this machine's ``expected`` GPUs are unhealthy (see HEALTH_QUERY), through
    NVML, else `nvidia-smi --query-gpu`; a GPU that no longer shows up counts. None where
    neither answers (no driver, no GPU here)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no package, no driver: nvidia-smi may still answer
        return parse_health_csv(_smi(HEALTH_QUERY), expected)
    try:
        seen, bad = pynvml.nvmlDeviceGetCount(), 0
        for i in range(seen):
            bad += not _healthy(pynvml, i)
        return bad + max(0, expected - seen)
    except Exception:
        return parse_health_csv(_smi(HEALTH_QUERY), expected)
    finally:
        pynvml.nvmlShutdown()


def _healthy(nvml: Any, index: int) -> bool:
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # GPU_IS_LOST, UNKNOWN, ...: the driver lost it
        return False
    try:
        if nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == nvml.NVML_FEATURE_ENABLED:
            return False
    except nvml.NVMLError_NotSupported:
        pass
    except Exception:
        return False
    try:
        _corrected, _uncorrected, pending, failed = nvml.nvmlDeviceGetRemappedRows(handle)
        return not (pending or failed)
    except nvml.NVMLError_NotSupported:
        return True
    except Exception:
        return False


def parse_health_csv(text: str, expected: int) -> int | None:
    """Unhealthy GPUs in HEALTH_QUERY's output: a row saying Yes or an error ("[GPU requires
    reset]", "[Unknown Error]"), a line naming a GPU nvidia-smi cannot reach, and each of the
    ``expected`` GPUs not listed; None where nothing names a GPU (nvidia-smi absent, no driver,
    or a driver refusing the query's fields)."""
    rows = [line for line in text.splitlines() if line.strip()]
    if not rows:
        return None
    seen = bad = 0
    for line in rows:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4 and cells[0].isdigit():
            seen += 1
            bad += any(c == "Yes" or (c.startswith("[") and c != "[N/A]") for c in cells[1:])
        elif "Unable to determine the device handle" in line or "GPU is lost" in line:
            bad += 1
    if not seen and not bad:
        return None
    return bad + max(0, expected - seen - bad)


def _smi(argv: list[str]) -> str:
    """nvidia-smi's stdout and stderr (a GPU it cannot reach is named on either); "" where absent."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout + done.stderr


def main() -> int:
    """`python -m ringleader.topology.nvml`: this machine's GPUs as `nvidia-smi topo -m` text
    (how the head reads a host's topology over ssh when nvidia-smi is absent there)."""
    found = discover()
    if found.topology.n_gpus == 0:
        print(found.reason, file=sys.stderr)
        return 3
    print(render_topo_text(found.topology))
    return 0


if __name__ == "__main__":
    sys.exit(main())
