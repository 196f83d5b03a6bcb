"""InfiniBand fabrics written as `ibnetdiscover` prints them (infiniband-diags' ibnetdiscover(8):
a block per node, `sysimgguid=` (shared by every chip of one chassis) before its `Switch` or
`Ca` header, then one line per cabled port naming the peer and its port), for shapes the
reference dumps lack: storage hosts on a spine, a director chassis with a spare line card."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Fabric:
    # name -> (kind, description, chassis): chassis is the system image a chip shares (None: its own)
    nodes: dict[str, tuple[str, str, str | None]] = field(default_factory=dict)
    cables: list[tuple[str, str]] = field(default_factory=list)

    def switch(self, name: str, chassis: str | None = None, description: str | None = None) -> str:
        self.nodes[name] = ("Switch", description or name, chassis)
        return name

    def host(self, name: str) -> str:
        self.nodes[name] = ("Ca", f"{name} HCA-1", None)
        return name

    def cable(self, a: str, b: str, times: int = 1) -> None:
        self.cables += [(a, b)] * times

    def text(self) -> str:
        guid = {name: f"{i + 1:016x}" for i, name in enumerate(self.nodes)}
        chassis_guid = {c: f"{0xC0000 + i:016x}" for i, c in enumerate(sorted({c for _, _, c in self.nodes.values()
                                                                               if c}))}  # fmt: skip
        ports: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
        for a, b in self.cables:
            pa, pb = len(ports[a]) + 1, len(ports[b]) + 1
            ports[a].append((pa, b, pb))
            ports[b].append((pb, a, pa))
        lines = ["# Topology file: written for a test", ""]
        for name, (kind, desc, chassis) in self.nodes.items():
            prefix = "S" if kind == "Switch" else "H"
            sysimg = chassis_guid[chassis] if chassis else guid[name]
            lines += ["vendid=0x2c9", "devid=0xd2f0", f"sysimgguid=0x{sysimg}",
                      f"{'switchguid' if kind == 'Switch' else 'caguid'}=0x{guid[name]}"]  # fmt: skip
            count = 65 if kind == "Switch" else 1
            tail = " enhanced port 0 lid 1 lmc 0" if kind == "Switch" else ""
            lines.append(f'{kind}\t{count} "{prefix}-{guid[name]}"\t\t# "{desc}"{tail}')
            for port, peer, peer_port in ports[name]:
                peer_kind, peer_desc, _ = self.nodes[peer]
                peer_prefix = "S" if peer_kind == "Switch" else "H"
                lines.append(f'[{port}]\t"{peer_prefix}-{guid[peer]}"[{peer_port}]\t\t# "{peer_desc}" lid 2 4xNDR')
            lines.append("")
        return "\n".join(lines)


def fat_tree(leaves: int = 4, hosts_per_leaf: int = 24, spines: int = 2, uplinks_per_spine: int = 4) -> Fabric:
    """A 2-level fat tree: every leaf cabled to every spine (``uplinks_per_spine`` cables each)."""
    fabric = Fabric()
    spine_names = [fabric.switch(f"spine-{s}") for s in range(spines)]
    for leaf in range(leaves):
        name = fabric.switch(f"leaf-{leaf}")
        for h in range(hosts_per_leaf):
            fabric.cable(fabric.host(f"cn{leaf:02d}{h:02d}"), name)
        for spine in spine_names:
            fabric.cable(name, spine, uplinks_per_spine)
    return fabric
