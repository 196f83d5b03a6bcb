"""The network above the nodes: levels of switches (leaf, spine, core) or blocks, as a tree.

A ``NetworkTree`` gives every node its switch at each level, nearest the node first, and every
level its oversubscription (down:up bandwidth of one of its switches: 1 is non-blocking) and,
when known, one switch's uplink bandwidth. Two nodes under one leaf talk at full NIC speed; two
whose lowest common switch is a spine cross both leaves' uplinks. NVLink domains stay on the
node (``NodeSpec.nvlink_domain``): they are not part of the switched network.

Every input format (network_formats.py, the cluster file) reduces to the edges "node under
switch" and "switch under switch"; ``tree_from_edges`` checks them once:
  - a node under two different switches is refused, naming the node;
  - switches that list each other (cross-connected spines, as real topology.conf files have)
    are one logical switch, and the parents of one switch (a multi-rooted fat tree's spines)
    are one logical switch too: placement cares which nodes share uplinks, not about cables;
  - a switch with nodes that is its own ancestor is a cycle, refused naming the switch;
  - a switch's level is its height (nodes' switches 0, their parents 1, ...), as Slurm's
    topology/tree counts it; a node under a shallower branch has that branch's switch at the
    levels it lacks (it shares them with no one else).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from ringleader.errors import UsageError

DEFAULT_LEVEL_NAMES = ("leaf", "spine", "core")
# A hostlist expression expands to at most this many names (node[1-99999999] is a typo, not a cluster).
MAX_HOSTLIST = 100_000
_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class Level:
    """One level of switches. ``oversubscription``: a switch's down:up bandwidth (4.0 = 4:1);
    ``uplink_gbps``: one switch's total uplink, when known (the cluster file then raises the
    ratio to the nodes' network Gb/s below a switch over it, if that is more)."""

    name: str
    oversubscription: float = 1.0
    uplink_gbps: float | None = None


@dataclass(frozen=True)
class NetworkPlace:
    """Where one node sits in the tree: the levels (shared by the cluster's nodes) and its
    switch at each, nearest first."""

    levels: tuple[Level, ...]
    switches: tuple[str, ...]


def default_level_name(height: int) -> str:
    return DEFAULT_LEVEL_NAMES[height] if height < len(DEFAULT_LEVEL_NAMES) else f"level-{height}"


@dataclass(frozen=True)
class NetworkTree:
    """Levels (nearest the nodes first) and every node's switch per level, in node order."""

    levels: tuple[Level, ...]
    paths: tuple[tuple[str, tuple[str, ...]], ...]
    # What its source said that the tree keeps another way (a topology.conf node under two
    # leaves), for whoever read it to tell the user.
    warnings: tuple[str, ...] = field(default=(), compare=False)
    by_node: Mapping[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_node", dict(self.paths))
        for node, path in self.paths:
            if len(path) != len(self.levels):
                raise ValueError(f"node {node!r} has {len(path)} switches for {len(self.levels)} levels")

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(level.name for level in self.levels)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(node for node, _ in self.paths)

    def level_index(self, name: str) -> int:
        """The index of level ``name`` (refused in one line naming the levels there are)."""
        if name in self.level_names:
            return self.level_names.index(name)
        have = ", ".join(self.level_names) or "none (no network tree declared)"
        raise UsageError(f"no network level {name!r}", f"use one of: {have}")

    @cached_property
    def switches(self) -> tuple[Mapping[str, tuple[str, ...]], ...]:
        """Per level: switch -> its nodes, both in node order."""
        out: list[dict[str, list[str]]] = [{} for _ in self.levels]
        for node, path in self.paths:
            for k, switch in enumerate(path):
                out[k].setdefault(switch, []).append(node)
        return tuple({s: tuple(ns) for s, ns in level.items()} for level in out)

    def common_level(self, nodes: Iterable[str]) -> int:
        """The lowest level whose one switch holds all ``nodes``: -1 for one node, len(levels)
        when no switch does (or a node is outside the tree)."""
        names = list(dict.fromkeys(nodes))
        if len(names) <= 1:
            return -1
        paths = [self.by_node.get(n) for n in names]
        if any(p is None for p in paths):
            return len(self.levels)
        for k in range(len(self.levels)):
            if len({p[k] for p in paths if p is not None}) == 1:
                return k
        return len(self.levels)

    def with_levels(self, levels: Sequence[Level]) -> NetworkTree:
        """The tree with its levels' names and bandwidths replaced (same count)."""
        if len(levels) != len(self.levels):
            raise UsageError(
                f"the network tree has {len(self.levels)} level(s) ({', '.join(self.level_names)}), "
                f"{len(levels)} given", "describe each level of the tree, nearest the nodes first")  # fmt: skip
        return NetworkTree(tuple(levels), self.paths, self.warnings)

    def without_idle_top_levels(self) -> NetworkTree:
        """The tree without top levels that group nothing (each of their switches above one
        switch only: a spare switch with no hosts below, cabled to the spines): no traffic turns
        there, so they are no level."""
        levels, paths = list(self.levels), [list(path) for _, path in self.paths]
        while len(levels) > 1:
            children: dict[str, set[str]] = {}
            for path in paths:
                children.setdefault(path[-1], set()).add(path[-2])
            if any(len(below) > 1 for below in children.values()):
                break
            levels.pop()
            for path in paths:
                path.pop()
        if len(levels) == len(self.levels):
            return self
        return NetworkTree(tuple(levels), tuple((n, tuple(p)) for (n, _), p in zip(self.paths, paths, strict=True)),
                           self.warnings)  # fmt: skip

    def check_nodes(self, known: Iterable[str], origin: str) -> None:
        """Refuse a tree naming a node the cluster does not have (one line naming it)."""
        have = set(known)
        for node in self.by_node:
            if node not in have:
                raise UsageError(f"{origin}: the network tree names node {node!r}, which the cluster does not have",
                                 "declare the node or remove it from the network tree")  # fmt: skip

    def place_of(self, node: str) -> NetworkPlace | None:
        path = self.by_node.get(node)
        return NetworkPlace(self.levels, path) if path is not None else None

    def describe(self) -> str:
        """ "2 levels: leaf (4 switches, 1:1), spine (1 switch, 4:1)"."""
        parts = []
        for level, switches in zip(self.levels, self.switches, strict=True):
            ratio = f"{level.oversubscription:g}:1"
            parts.append(f"{level.name} ({len(switches)} switch{'es' if len(switches) != 1 else ''}, {ratio})")
        return f"{len(self.levels)} level(s): " + ", ".join(parts)


def tree_to_dict(tree: NetworkTree) -> dict[str, Any]:
    """JSON-ready: levels, then each node's switches (nearest first)."""
    return {"levels": [{"name": lv.name, "oversubscription": lv.oversubscription, "uplink_gbps": lv.uplink_gbps}
                       for lv in tree.levels], "switches": {node: list(path) for node, path in tree.paths}}  # fmt: skip


def tree_from_dict(data: Mapping[str, Any]) -> NetworkTree:
    levels = tuple(Level(str(lv["name"]), float(lv.get("oversubscription", 1.0)),
                         None if lv.get("uplink_gbps") is None else float(lv["uplink_gbps"]))
                   for lv in data["levels"])  # fmt: skip
    return NetworkTree(levels, tuple((str(n), tuple(map(str, p))) for n, p in data["switches"].items()))


def tree_of(places: Iterable[tuple[str, NetworkPlace | None]]) -> NetworkTree | None:
    """The tree nodes' places make up (None when no node has one)."""
    placed = [(name, place) for name, place in places if place is not None]
    return NetworkTree(placed[0][1].levels, tuple((n, p.switches) for n, p in placed)) if placed else None


def tree_from_edges(
    node_under: Sequence[tuple[str, str]],
    switch_under: Sequence[tuple[str, str]],
    origin: str,
    level_names: Sequence[str] | None = None,
    multi_homed: str = "refuse",
) -> NetworkTree:
    """The tree of (node, switch) and (child switch, parent switch) edges, checked (module doc).
    ``multi_homed="first"``: a node under two switches stays under the first, with a warning
    (Slurm's topology/tree runs so), instead of being refused."""
    leaf_of: dict[str, str] = {}
    also: dict[str, list[str]] = {}
    for node, switch in node_under:
        if leaf_of.setdefault(node, switch) != switch:
            if multi_homed != "first":
                raise UsageError(f"{origin}: node {node!r} is under two switches ({leaf_of[node]}, {switch})",
                                 "list each node under one leaf switch or block only")  # fmt: skip
            also.setdefault(node, []).append(switch)
    with_nodes = set(leaf_of.values())
    order = list(dict.fromkeys([*leaf_of.values(), *(s for edge in switch_under for s in edge)]))
    children: dict[str, set[str]] = {s: set() for s in order}
    for child, parent in switch_under:
        if child == parent:
            raise UsageError(f"{origin}: switch {child!r} lists itself", "remove it from its own Switches=")
        children[parent].add(child)
    logical = _collapse(order, children, with_nodes, origin)
    tree = _tree(leaf_of, order, children, logical, origin, level_names)
    if not also:
        return tree
    nodes = ", ".join(f"{node} ({leaf_of[node]}, also {', '.join(others)})" for node, others in also.items())
    return replace(tree, warnings=(f"{origin}: nodes under several leaf switches, each kept under the first that "
                                   f'lists it (as Slurm warns "Multiple leaf switches contain nodes" and runs): '
                                   f"{nodes}",))  # fmt: skip


def _collapse(order: list[str], children: Mapping[str, set[str]], with_nodes: set[str], origin: str) -> dict[str, str]:
    """Each switch's logical switch: cycles of switches without nodes joined, then each switch's
    parents joined (a union-find, named by the first member in input order)."""
    root = {s: s for s in order}

    def find(s: str) -> str:
        while root[s] != s:
            root[s] = root[root[s]]
            s = root[s]
        return s

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            first, second = sorted((ra, rb), key=order.index)
            root[second] = first

    for component in _cycles(order, children):
        leaf = next((s for s in component if s in with_nodes), None)
        if leaf is not None:
            raise UsageError(f"{origin}: switch {leaf!r} is its own ancestor (a cycle through "
                             f"{' -> '.join(component)})", "list a switch with nodes under switches only")  # fmt: skip
        for s in component[1:]:
            union(component[0], s)
    changed = True
    while changed:  # join the parents of each logical switch until nothing changes
        changed = False
        parents: dict[str, str] = {}
        for parent in order:
            for child in children[parent]:
                c, p = find(child), find(parent)
                if c == p:
                    continue
                if c in parents and find(parents[c]) != p:
                    union(parents[c], p)
                    changed = True
                parents[c] = p
    for parent in order:
        for child in children[parent]:
            if find(child) == find(parent) and find(child) in {find(s) for s in with_nodes}:
                raise UsageError(f"{origin}: switch {child!r} is both below and beside {parent!r}",
                                 "list each switch under switches of one level only")  # fmt: skip
    return {s: find(s) for s in order}


def _cycles(order: list[str], children: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one switch (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in order:
        if start in index:
            continue
        work = [(start, iter(sorted(children[start], key=order.index)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            child = next(it, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(children[child], key=order.index))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component, key=order.index))
    return found


def _tree(
    leaf_of: Mapping[str, str], order: list[str], children: Mapping[str, set[str]], logical: Mapping[str, str],
    origin: str, level_names: Sequence[str] | None,
) -> NetworkTree:  # fmt: skip
    sizes: dict[str, int] = {}
    for s in order:
        sizes[logical[s]] = sizes.get(logical[s], 0) + 1
    name = {s: logical[s] if sizes[logical[s]] == 1 else f"{logical[s]}+{sizes[logical[s]] - 1}" for s in order}
    parent: dict[str, str] = {}
    kids: dict[str, set[str]] = {}
    for p in order:
        for c in children[p]:
            lc, lp = name[c], name[p]
            if lc != lp:
                parent[lc] = lp
                kids.setdefault(lp, set()).add(lc)
    height: dict[str, int] = {}

    def height_of(s: str, depth: int = 0) -> int:
        if s not in height:
            if depth > len(order):
                raise UsageError(f"{origin}: switch {s!r} is its own ancestor", "remove the cycle")
            height[s] = 1 + max((height_of(c, depth + 1) for c in kids.get(s, ())), default=-1)
        return height[s]

    leaves = {name[s] for s in leaf_of.values()}
    top = max((height_of(s) for s in leaves | set(parent.values())), default=0)
    count = top + 1
    names = list(level_names) if level_names is not None else [default_level_name(k) for k in range(count)]
    if len(names) < count:
        names += [default_level_name(k) for k in range(len(names), count)]
    paths = []
    for node, switch in leaf_of.items():
        chain = [name[switch]]
        while chain[-1] in parent:
            chain.append(parent[chain[-1]])
        path = []
        for k in range(count):
            path.append(next((s for s in chain if height_of(s) >= k), chain[-1]))
        paths.append((node, tuple(path)))
    return NetworkTree(tuple(Level(n) for n in names[:count]), tuple(paths))


def expand_hostlist(text: str, origin: str) -> list[str]:
    """A Slurm hostlist expression as names: "node[01-03,7],gpu-a" -> node01 node02 node03 node7 gpu-a.
    Several bracket groups multiply ("r[1-2]n[1-2]"); zero padding follows the range's start."""
    names: list[str] = []
    for part in _top_level_split(text.strip(), origin):
        if part:
            names.extend(_expand_one(part, origin, MAX_HOSTLIST - len(names)))
    return names


def _top_level_split(text: str, origin: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if depth not in (0, 1):
            raise UsageError(f"{origin}: unbalanced brackets in hostlist {text!r}", "write e.g. node[01-16]")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise UsageError(f"{origin}: unbalanced brackets in hostlist {text!r}", "write e.g. node[01-16]")
    parts.append(text[start:])
    return parts


def _expand_one(part: str, origin: str, room: int) -> list[str]:
    at = part.find("[")
    if at < 0:
        return [part]
    end = part.index("]", at)
    head, body, tail = part[:at], part[at + 1 : end], part[end + 1 :]
    values: list[str] = []
    for item in body.split(","):
        m = _RANGE_RE.match(item.strip())
        if m is None:
            raise UsageError(f"{origin}: {item!r} in hostlist {part!r} is not a number or range",
                             "write ranges as node[01-16,20]")  # fmt: skip
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo) or int(hi) - int(lo) >= room:
            raise UsageError(f"{origin}: range {item!r} in hostlist {part!r} is reversed or too long",
                             f"write a range low-high of at most {MAX_HOSTLIST} names")  # fmt: skip
        width = len(lo) if lo.startswith("0") else 0
        values.extend(str(v).zfill(width) for v in range(int(lo), int(hi) + 1))
    rests = _expand_one(tail, origin, room) if "[" in tail else [tail]
    if len(values) * len(rests) > room:
        raise UsageError(f"{origin}: hostlist {part!r} names over {MAX_HOSTLIST} hosts", "split the range")
    return [f"{head}{v}{r}" for v in values for r in rests]
