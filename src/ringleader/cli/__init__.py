"""The `ringleader` command: parses arguments and renders results; all work happens in the API."""

import signal

# Ctrl-C while the command's modules load (its first tens of milliseconds) ends it quietly, as it
# ends any Unix tool, rather than with a traceback; main() then makes Ctrl-C a KeyboardInterrupt
# again, which click turns into "aborted" (exit 130).
QUIET_INTERRUPT = signal.getsignal(signal.SIGINT) is signal.default_int_handler
if QUIET_INTERRUPT:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
