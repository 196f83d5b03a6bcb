"""``RUNTIME run ARGS`` for one rank, so that its container ends with it.

A container's client (podman or docker) stopped before it forwards signals, or killed, leaves
its container behind (running, or exited and never removed). So the client writes the
container's id to a file (--cidfile), and signals go to the client. When a stop comes (the
first signal), a reaper starts in its own session, deaf to the stop's signals, holding the read
end of a pipe only this guard writes to: once the guard is gone, however (ringleader kills a
stopped rank's whole process tree with -9 after its grace period), the reaper removes the
container by force. A rank that ends by itself is cleaned up by the guard.

Standard library only: sent as source (``containers.guard_command``) to wherever a rank runs.
"""

import os
import signal
import subprocess
import sys
import tempfile

# Waits for the guard to be gone (end of file on its stdin), then removes what is left.
REAPER = (
    "import os, shutil, signal, subprocess, sys; "
    "[signal.signal(s, signal.SIG_IGN) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)]; "
    "sys.stdin.buffer.read(); rt, f, d = sys.argv[1:4]; "
    "cid = open(f).read().strip() if os.path.exists(f) else ''; "
    "cid and subprocess.run([rt, 'rm', '-f', *(['-t', '0'] if os.path.basename(rt) == 'podman' else []), cid], "
    "stdin=subprocess.DEVNULL, capture_output=True, timeout=120); shutil.rmtree(d, ignore_errors=True)"
)


def remove(runtime: str, cidfile: str, folder: str) -> None:
    """Remove the container if the client left it (no-op after --rm did), and the id's folder."""
    reaper = [sys.executable, "-c", REAPER, runtime, cidfile, folder]
    subprocess.run(reaper, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def guard(argv: list[str]) -> int:
    runtime, args = argv[0], argv[2:]  # RUNTIME run ARGS...
    folder = tempfile.mkdtemp(prefix="ringleader-container-")
    cidfile = os.path.join(folder, "cid")
    client = subprocess.Popen([runtime, "run", "--cidfile", cidfile, *args], stdin=subprocess.DEVNULL)
    write_end: list[int] = []

    def stop(number: int, _frame: object) -> None:
        if not write_end:  # the first stop: a reaper outlives this guard, however it ends
            read_end, end = os.pipe()
            subprocess.Popen([sys.executable, "-c", REAPER, runtime, cidfile, folder], stdin=read_end,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
            os.close(read_end)
            write_end.append(end)
        client.send_signal(number)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    code = client.wait()
    if write_end:
        os.close(write_end[0])  # the reaper takes it from here
    else:
        remove(runtime, cidfile, folder)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(guard(sys.argv[1:]))
