"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

A replica leads while its last successful acquire or renew is younger than the lease duration
less a safety margin; every write goes with the Lease's resourceVersion, so two replicas racing
for an expired lease cannot both win: the API server answers one of them 409 Conflict.

Expiry is measured on this replica's own clock, never by comparing the holder's renewTime with
local time (two machines' clocks need not agree): as client-go's leaderelection does, the replica
notes when it last saw the Lease's record change (``observedTime``) and takes the lease over only
once the record has stayed the same for a whole leaseDurationSeconds (tryAcquireOrRenew:
``le.observedTime.Add(time.Second*time.Duration(oldLeaderElectionRecord.LeaseDurationSeconds))
.After(now.Time)`` means "held by someone else and not yet expired"). That local clock is
``clock.monotonic()``; renewTime and acquireTime are written in its wall time for people to read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ringleader.clock import SYSTEM_CLOCK, Clock
from ringleader.engines.kubernetes.client import Api, ApiError


def micro_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaderElector:
    api: Api
    namespace: str
    name: str
    identity: str
    lease_seconds: int = 15
    clock: Clock = SYSTEM_CLOCK
    _valid_until: float = field(default=0.0, init=False)
    transitions: int = field(default=0, init=False)
    _observed: Any = field(default=None, init=False)  # the Lease spec as last seen
    _observed_at: float = field(default=0.0, init=False)  # when it was first seen so, monotonic

    @property
    def leading(self) -> bool:
        """True only while a lease this replica holds is surely still valid."""
        return self.clock.monotonic() < self._valid_until

    def try_acquire_or_renew(self) -> bool:
        """One round: take the lease if free or expired, renew it if ours. Returns leading."""
        now = self.clock.monotonic()
        try:
            lease = self.api.read_lease(self.namespace, self.name)
            if lease is None:
                self._remember(self.api.create_lease(self.namespace, self._lease(None, 0)), now)
                return self._won(now)
            spec = lease.get("spec") or {}
            if spec != self._observed:
                self._observed, self._observed_at = spec, now
            holder = spec.get("holderIdentity") or ""
            duration = int(spec.get("leaseDurationSeconds") or self.lease_seconds)
            if holder and holder != self.identity and self._observed_at + duration > now:
                self._valid_until = 0.0
                return False  # someone else's, renewed (or first seen) less than a duration ago
            transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
            acquired = spec.get("acquireTime") if holder == self.identity else None
            self._remember(self.api.replace_lease(self.namespace, self.name,
                                                  self._lease(lease, transitions, acquired)), now)  # fmt: skip
            return self._won(now)
        except ApiError:
            # A conflict (another replica wrote first) or the server unreachable: not leading
            # until a round succeeds; what was valid stays valid until it expires.
            return self.leading

    def _remember(self, written: dict[str, Any], now: float) -> None:
        self._observed, self._observed_at = written.get("spec") or {}, now

    def _won(self, now: float) -> bool:
        # A margin of a fifth of the duration: stop acting before anyone else may take over.
        self._valid_until = now + self.lease_seconds * 0.8
        return True

    def _lease(self, old: dict[str, Any] | None, transitions: int, acquired: str | None = None) -> dict:
        now = self.clock.now()  # written for people to read; expiry never compares it with a clock here
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if old is not None:
            metadata["resourceVersion"] = (old.get("metadata") or {}).get("resourceVersion")
        return {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                "acquireTime": acquired or micro_time(now), "renewTime": micro_time(now),
                "leaseTransitions": transitions,
            },
        }  # fmt: skip

    def release(self) -> None:
        """Give the lease up at shutdown so a standby takes over at once."""
        if not self.leading:
            return
        self._valid_until = 0.0
        try:
            lease = self.api.read_lease(self.namespace, self.name)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                body = self._lease(lease, int((lease.get("spec") or {}).get("leaseTransitions") or 0))
                body["spec"]["holderIdentity"] = ""
                body["spec"]["leaseDurationSeconds"] = 1
                self.api.replace_lease(self.namespace, self.name, body)
        except ApiError:
            pass
