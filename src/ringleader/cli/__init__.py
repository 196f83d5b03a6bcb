"""The `ringleader` command: parses arguments and renders results; all work happens in the API."""
