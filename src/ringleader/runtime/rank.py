"""The rank wrapper: ``python -m ringleader.runtime.rank PLAN [--launcher | --rank N] -- PROGRAM``.

Runs one instance's program with that rank's environment (GPUs, torchrun variables), writes its
output with timestamps to the instance's log (and, under mpirun, to stdout too), records its pid,
start time and exit code in a state file, and forwards signals. Standard library only: it starts
once per rank.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from ringleader.runtime.procs import start_time

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def stamp() -> bytes:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ ").encode()


def rank_env(plan: dict[str, Any], entry: dict[str, Any]) -> dict[str, str]:
    """The variables one rank sees: its GPUs (real or virtual) and torchrun's set."""
    gpus = ",".join(str(g) for g in entry["node_gpus"])
    env = {
        "RANK": str(entry["rank"]), "WORLD_SIZE": str(plan["world_size"]),
        "LOCAL_RANK": str(entry["local_rank"]), "LOCAL_WORLD_SIZE": str(entry["local_world_size"]),
        "GROUP_RANK": str(entry["node_rank"]), "NODE_RANK": str(entry["node_rank"]),
        "MASTER_ADDR": plan["master_addr"], "MASTER_PORT": str(plan["master_port"]),
        "RINGLEADER_JOB": plan["job"], "RINGLEADER_INSTANCE": entry["instance"],
        "RINGLEADER_NODE": entry["node"],
        "RINGLEADER_WORKER_GPUS": ",".join(str(g) for g in entry["gpus"]),
    }  # fmt: skip
    if entry["emulated"]:
        # Virtual GPU ids: never hand a real GPU to a process of an emulated node.
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["RINGLEADER_VIRTUAL_GPUS"] = gpus
    else:
        env["CUDA_VISIBLE_DEVICES"] = gpus
        env["RINGLEADER_VIRTUAL_GPUS"] = ""
    return env


def _entry(plan: dict[str, Any], args: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    if "--launcher" in args:
        # mpirun itself uses no GPU; the ranks it starts set their own.
        return plan["launcher"], {"CUDA_VISIBLE_DEVICES": "", "RINGLEADER_JOB": plan["job"]}
    if "--rank" in args:
        rank = int(args[args.index("--rank") + 1])
    else:
        rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0")))
    entry = plan["ranks"][rank]
    return entry, rank_env(plan, entry)


def _write_state(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _pump(src: BinaryIO, log: BinaryIO, tee: bool) -> None:
    for line in iter(src.readline, b""):
        log.write(stamp() + (line if line.endswith(b"\n") else line + b"\n"))
        log.flush()
        if tee:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()


def main(argv: list[str]) -> int:
    split = argv.index("--")
    own, program = argv[:split], argv[split + 1 :]
    plan = json.loads(Path(own[0]).read_text())
    entry, env = _entry(plan, own[1:])
    tee = "--launcher" not in own and "OMPI_COMM_WORLD_RANK" in os.environ
    env = {**os.environ, **plan["env"], **env}
    env.setdefault("PYTHONUNBUFFERED", "1")
    state_file, log_file = Path(entry["state"]), Path(entry["log"])
    state_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {
        "pid": os.getpid(), "pid_start": start_time(os.getpid()), "instance": entry["instance"],
        "started_at": time.time(),
    }  # fmt: skip
    _write_state(state_file, state)
    with open(log_file, "ab") as log:
        try:
            child = subprocess.Popen(program, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        except OSError as exc:
            log.write(stamp() + f"ringleader: cannot start {program[0]!r}: {exc.strerror}\n".encode())
            _write_state(state_file, {**state, "exit_code": 127, "ended_at": time.time()})
            return 127
        for sig in FORWARDED:
            signal.signal(sig, lambda s, _f: child.send_signal(s))
        state.update(child_pid=child.pid, child_start=start_time(child.pid))
        _write_state(state_file, state)
        assert child.stdout is not None
        pump = threading.Thread(target=_pump, args=(child.stdout, log, tee), daemon=True)
        pump.start()
        code = child.wait()
        pump.join(timeout=5)
    # Killed by a signal: 128 + its number, as shells, Kubernetes and arena show it.
    final: dict[str, Any] = {**state, "exit_code": code if code >= 0 else 128 - code, "ended_at": time.time()}
    if code < 0:
        final["signal"] = signal_name(-code)
    _write_state(state_file, final)
    return int(final["exit_code"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
