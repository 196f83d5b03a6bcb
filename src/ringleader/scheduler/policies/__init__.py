"""Built-in placement policies; importing this package registers them."""

from ringleader.scheduler.policies import ack, besteffort, default, throughput, topology  # noqa: F401
