"""The cluster file's schema: every key a node may have, its type and its range.

Checked strictly (pydantic's strict mode): a number is not a string, a mapping is not a
``gpu_model``, ``2001-12-14`` (a date to YAML) is not a name, and a key the schema does not name
is refused, at the top level as in a node. What the types cannot say (a DNS-1123 name, a label key
`ringleader node label` accepts, an ssh address, exactly one topology source) ``cluster.py``
checks on the validated values, with the same messages as everywhere else.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ringleader.inputs import MAX_FILE_BYTES
from ringleader.topology.bandwidth import MATRICES
from ringleader.topology.grammar import WORD_PATTERN

MAX_NODES = 10_000  # a cluster's nodes, `count` included: checked before anything is built

# Lengths: DNS names are at most 253 characters; paths at most PATH_MAX; a link kind of a
# `nvidia-smi topo -m` matrix is a few characters (NV18, SYS, PIX, X).
Name = Annotated[str, StringConstraints(max_length=253)]
PathText = Annotated[str, StringConstraints(min_length=1, max_length=4096)]
LinkKind = Annotated[str, StringConstraints(max_length=32)]
# The largest matrix a row list may hold; the GPU limit itself (with its own message) is the parser's.
MAX_MATRIX_ROWS = 1024
Rows = Annotated[list[Annotated[list[LinkKind], Field(max_length=MAX_MATRIX_ROWS)]], Field(max_length=MAX_MATRIX_ROWS)]
GbPerS = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]
BandwidthRows = Annotated[list[Annotated[list[GbPerS], Field(max_length=MAX_MATRIX_ROWS)]],
                          Field(max_length=MAX_MATRIX_ROWS)]  # fmt: skip
# A label value as Kubernetes allows (at most 63 characters); the key's rule is `node label`'s.
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=253)]  # the grammar: cluster.py, as node label's
LabelValue = Annotated[str, StringConstraints(max_length=63)]
Word = Annotated[str, StringConstraints(max_length=253, pattern=WORD_PATTERN)]


class NodeEntry(BaseModel):
    """One entry of ``nodes:`` (see the module doc of ringleader.topology.cluster)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    preset: Annotated[str, StringConstraints(max_length=64)] | None = None
    matrix: Annotated[str, StringConstraints(max_length=MAX_FILE_BYTES)] | Rows | None = None
    matrix_file: PathText | None = None
    bandwidth: Annotated[str, StringConstraints(max_length=MAX_FILE_BYTES)] | BandwidthRows | None = None
    bandwidth_file: PathText | None = None
    bandwidth_matrix: Annotated[str, StringConstraints(pattern=f"^({'|'.join(MATRICES)})$")] | None = None
    nvlink_domain: Word = ""
    # Gb/s of the inter-node network: above 0, and below any link built so far by a wide margin.
    network_gbps: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] | None = None
    emulated: bool = False
    labels: dict[LabelKey, LabelValue] | None = None
    count: Annotated[int, Field(ge=1, le=MAX_NODES)] = 1
    gpu_model: Annotated[str, StringConstraints(max_length=128)] = ""
    address: Name | None = None
    user: Annotated[str, StringConstraints(max_length=64)] | None = None
    port: int | None = None  # its range is checked with the address (the same message as a bad host's)
    identity_file: PathText | None = None


class LevelEntry(BaseModel):
    """One level of the network tree, nearest the nodes first (ringleader.topology.network)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    oversubscription: Annotated[float, Field(ge=1, le=1000, allow_inf_nan=False)] = 1.0
    uplink_gbps: Annotated[float, Field(gt=0, le=1e7, allow_inf_nan=False)] | None = None


Hostlist = Annotated[str, StringConstraints(min_length=1, max_length=65536)] | Annotated[
    list[Name], Field(max_length=MAX_NODES)]  # fmt: skip


class SwitchEntry(BaseModel):
    """A switch (or block) and what is under it: nodes, other switches, as names or a Slurm
    hostlist (``node-[0-15]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Word
    nodes: Hostlist | None = None
    switches: Hostlist | None = None


class NetworkSection(BaseModel):
    """The network above the nodes: its switches here, or a file in a format users have (Slurm
    topology.conf / topology.yaml, ibnetdiscover output); ``levels`` names them and says their
    oversubscription."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    levels: Annotated[list[LevelEntry], Field(max_length=16)] | None = None
    switches: Annotated[list[SwitchEntry], Field(min_length=1, max_length=MAX_NODES)] | None = None
    file: PathText | None = None


class ClusterFile(BaseModel):
    """A cluster file: a list of nodes and, optionally, the network tree above them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: Annotated[list[NodeEntry], Field(min_length=1, max_length=MAX_NODES)]
    network: NetworkSection | None = None
