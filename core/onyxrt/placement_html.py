"""The placement report as a self-contained HTML page, with a picture of the graph.

``onyxrt explain MODEL --format html`` writes this page. It needs no network and no
library: the picture is inline SVG laid out here in Python, and a short inline script
adds zoom (mouse wheel), pan (drag), a *fit* button, and expanding collapsed chains.

The picture is a layered drawing, top to bottom: a node's layer is the longest path to
it from the graph inputs. Nodes are boxes coloured by provider; fused groups are dashed
outlines; an edge that crosses memory spaces (a per-run copy) is red and labelled with
its size. Maximal runs of nodes that each feed only the next, on one provider and in one
fused group, are drawn as one box ("5 nodes: Conv → Relu → …") that opens on click, so
a few hundred nodes stay readable. Every node keeps an element with ``data-node="<name>"``
and a tooltip (op, provider, group, refusals).

The page reads top down from the overview to the detail: a short summary (nodes per
provider, partitions, copies, refusals; fallbacks spelled out), then the picture, then the
full report, partitions and tables in collapsed ``<details>`` sections.

>>> page = render_html(session.placement, graph, "placement")        # doctest: +SKIP
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

from .placement import CopyRecord, NodePlacement, PlacementReport
from .records import record

__all__ = [
    "GraphNodeLike",
    "GraphLike",
    "Box",
    "Edge",
    "Layout",
    "layout_graph",
    "provider_colours",
    "render_svg",
    "render_html",
]

#: Provider colours, by position in the session's provider list (CPU is always grey).
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1")
CPU_COLOUR = "#9c9c9c"
_CPU = "CPUExecutionProvider"
_COPY_COLOUR = "#d62728"

#: Runs of at least this many nodes are collapsed into one box.
MIN_CHAIN = 2

# Geometry of the drawing, in SVG user units (pixels at zoom 1).
_BOX_W = 176.0
_BOX_H = 44.0
_TERMINAL_H = 26.0
_DUMMY_W = 10.0  # the lane a long edge takes through an intermediate layer
_GAP_X = 26.0
_ROW_GAP = 46.0
_MARGIN = 24.0
_MEMBER_H = 24.0
_CHARS_PER_LINE = 25  # what fits in a box at 12px sans-serif


class GraphNodeLike(Protocol):
    """What the renderer reads from a node (``onyxrt.graph.Node`` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def op_type(self) -> str: ...

    @property
    def inputs(self) -> Sequence[str]: ...

    @property
    def outputs(self) -> Sequence[str]: ...

    @property
    def implicit_inputs(self) -> Sequence[str]: ...


class GraphLike(Protocol):
    """What the renderer reads from a graph (``onyxrt.graph.Graph`` has it)."""

    @property
    def nodes(self) -> Sequence[GraphNodeLike]: ...

    @property
    def inputs(self) -> Sequence[str]: ...

    @property
    def outputs(self) -> Sequence[str]: ...


@record(frozen=True)
class Box:
    """One drawn unit: a node, a collapsed chain of nodes, or a graph input or output.

    ``key`` is unique in the layout (``n:<node>``, ``c:<first node>``, ``in:<value>``,
    ``out:<value>``); ``members`` are the nodes the box stands for (none for terminals).
    ``x``/``y`` are the top-left corner.
    """

    key: str
    kind: str  # "node", "chain", "input" or "output"
    members: tuple[NodePlacement, ...]
    label: str
    layer: int
    x: float
    y: float
    w: float
    h: float


@record(frozen=True)
class Edge:
    """Data flowing from one box to another: the values, the copies on the way, and the
    polyline it is drawn along (through lanes in the layers it crosses)."""

    src: str
    dst: str
    values: tuple[str, ...]
    copies: tuple[CopyRecord, ...]
    points: tuple[tuple[float, float], ...]


@record(frozen=True)
class Layout:
    """Boxes and edges with coordinates; ``width``/``height`` bound the drawing."""

    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    width: float
    height: float

    def box(self, key: str) -> Box:
        """The box with ``key``."""
        for b in self.boxes:
            if b.key == key:
                return b
        raise KeyError(key)


# --------------------------------------------------------------------------- layout


def _node_edges(
    report: PlacementReport, graph: GraphLike
) -> tuple[list[str], dict[tuple[str, str], list[str]]]:
    """Node keys in topological order, and (producer key, consumer key) → values."""
    placed = {n.node: n for n in report.nodes}
    in_graph = [n for n in graph.nodes if n.name in placed]
    order = [f"n:{n.name}" for n in in_graph]
    seen = {n.name for n in in_graph}
    order += [f"n:{n.node}" for n in report.nodes if n.node not in seen]  # no edges known

    graph_inputs = set(graph.inputs)
    producer: dict[str, str] = {}
    for node in in_graph:
        for value in node.outputs:
            if value:
                producer[value] = f"n:{node.name}"
    edges: dict[tuple[str, str], list[str]] = {}

    def source(value: str) -> str | None:
        if value in producer:
            return producer[value]
        return f"in:{value}" if value in graph_inputs else None

    for node in in_graph:
        for value in dict.fromkeys([*node.inputs, *node.implicit_inputs]):
            src = source(value) if value else None
            if src is not None:
                edges.setdefault((src, f"n:{node.name}"), []).append(value)
    for value in graph.outputs:
        src = source(value)
        if src is not None:
            edges.setdefault((src, f"out:{value}"), []).append(value)
    return order, edges


def _chains(
    order: list[str], edges: dict[tuple[str, str], list[str]], placed: dict[str, NodePlacement]
) -> list[list[str]]:
    """Node keys grouped into maximal runs (a run of one is a plain node), in order."""
    succ: dict[str, list[str]] = {}
    pred: dict[str, list[str]] = {}
    for src, dst in edges:
        succ.setdefault(src, []).append(dst)
        pred.setdefault(dst, []).append(src)

    def same_place(a: str, b: str) -> bool:
        pa, pb = placed[a[2:]], placed[b[2:]]
        return pa.provider == pb.provider and pa.group == pb.group

    nxt: dict[str, str] = {}
    has_prev: set[str] = set()
    for key in order:
        outs = succ.get(key, [])
        if len(outs) != 1 or not outs[0].startswith("n:"):
            continue
        after = outs[0]
        if len(pred.get(after, [])) == 1 and same_place(key, after):
            nxt[key] = after
            has_prev.add(after)
    runs: list[list[str]] = []
    done: set[str] = set()
    for key in order:
        if key in done or key in has_prev:
            continue
        run = [key]
        while run[-1] in nxt:
            run.append(nxt[run[-1]])
        runs.append(run)
        done.update(run)
    runs.extend([k] for k in order if k not in done)  # only in a malformed (cyclic) graph
    result: list[list[str]] = []
    for run in runs:
        if len(run) >= MIN_CHAIN:
            result.append(run)
        else:
            result.extend([k] for k in run)
    position = {k: i for i, k in enumerate(order)}
    result.sort(key=lambda r: position[r[0]])
    return result


def _copies_on(
    copies: Sequence[CopyRecord], values: Sequence[str], src: Box, dst: Box
) -> tuple[CopyRecord, ...]:
    """The per-run copies of ``values`` between the memory spaces of ``src`` and ``dst``
    (graph inputs and outputs live with the caller, so they match any side)."""
    src_provider = src.members[-1].provider if src.members else None
    dst_provider = dst.members[0].provider if dst.members else None
    return tuple(
        c for c in copies
        if c.value in values
        and src_provider in (None, c.src_provider)
        and dst_provider in (None, c.dst_provider)
        and (src_provider or dst_provider) is not None
    )


def _truncate(text: str, limit: int = _CHARS_PER_LINE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _chain_label(members: Sequence[NodePlacement]) -> str:
    return f"{len(members)} nodes: " + " → ".join(m.op_type for m in members)


def layout_graph(report: PlacementReport, graph: GraphLike) -> Layout:
    """Lay out the placed nodes of ``graph`` in layers (longest path from the inputs).

    Nodes come from ``report`` (a node the graph does not know is drawn without edges);
    edges from the values ``graph``'s nodes read and write. Runs of :data:`MIN_CHAIN` or
    more nodes are one box; edges longer than one layer take a lane through each layer
    they cross, and within a layer items sit near the mean position of what feeds them.
    """
    placed = {n.node: n for n in report.nodes}
    order, node_edges = _node_edges(report, graph)
    runs = _chains(order, node_edges, placed)

    # Units: input terminals, runs (chains or single nodes), output terminals.
    unit_of: dict[str, str] = {}
    specs: list[tuple[str, str, tuple[NodePlacement, ...], str]] = []
    for value in graph.inputs:
        specs.append((f"in:{value}", "input", (), value))
    for run in runs:
        members = tuple(placed[k[2:]] for k in run)
        if len(run) == 1:
            key, kind, label = run[0], "node", members[0].op_type
        else:
            key, kind, label = f"c:{run[0][2:]}", "chain", _chain_label(members)
        specs.append((key, kind, members, label))
        for k in run:
            unit_of[k] = key
    for value in graph.outputs:
        specs.append((f"out:{value}", "output", (), value))
    for key, *_ in specs:
        unit_of.setdefault(key, key)

    unit_edges: dict[tuple[str, str], list[str]] = {}
    for (src, dst), values in node_edges.items():
        a, b = unit_of[src], unit_of[dst]
        if a != b:
            bucket = unit_edges.setdefault((a, b), [])
            bucket.extend(v for v in values if v not in bucket)
    preds: dict[str, list[str]] = {}
    for a, b in unit_edges:
        preds.setdefault(b, []).append(a)

    # Units are in topological order (nodes are; a run's predecessors all feed its head).
    layer: dict[str, int] = {}
    for key, *_ in specs:
        layer[key] = max((layer[p] + 1 for p in preds.get(key, ()) if p in layer), default=0)

    # Lanes ("dummies") for edges that skip layers, so they do not run through boxes.
    rank = {key: i for i, (key, *_) in enumerate(specs)}
    items_by_layer: dict[int, list[str]] = {}
    item_preds: dict[str, list[str]] = {}
    width: dict[str, float] = {}
    for key, *_ in specs:
        items_by_layer.setdefault(layer[key], []).append(key)
        width[key] = _BOX_W
    lanes: dict[tuple[str, str], list[str]] = {}
    for a, b in unit_edges:
        prev = a
        chain: list[str] = []
        for lyr in range(layer[a] + 1, layer[b]):
            dummy = f"~{a}>{b}@{lyr}"
            items_by_layer.setdefault(lyr, []).append(dummy)
            item_preds[dummy] = [prev]
            width[dummy] = _DUMMY_W
            rank[dummy] = rank[b]
            chain.append(dummy)
            prev = dummy
        lanes[(a, b)] = chain
        item_preds.setdefault(b, []).append(prev)

    # Horizontal positions, layer by layer: near the mean centre of what feeds an item,
    # without overlaps; real boxes before lanes when they want the same place.
    centre: dict[str, float] = {}
    for lyr in sorted(items_by_layer):
        items = items_by_layer[lyr]
        wanted: dict[str, float] = {}
        for i, key in enumerate(items):
            feeders = [centre[p] for p in item_preds.get(key, ()) if p in centre]
            wanted[key] = (sum(feeders) / len(feeders) if feeders
                           else i * (_BOX_W + _GAP_X))
        items.sort(key=lambda k: (wanted[k], k.startswith("~"), rank[k]))
        lefts: list[float] = []
        for key in items:
            left = wanted[key] - width[key] / 2
            if lefts:
                prev_key = items[len(lefts) - 1]
                left = max(left, lefts[-1] + width[prev_key] + _GAP_X)
            lefts.append(left)
        shift = sum(wanted[k] - (x + width[k] / 2) for k, x in zip(items, lefts)) / len(items)
        for key, x in zip(items, lefts):
            centre[key] = x + width[key] / 2 + shift

    x_min = min(centre[k] - width[k] / 2 for k in centre)
    offset = _MARGIN - x_min

    def row_top(lyr: int) -> float:
        return _MARGIN + lyr * (_BOX_H + _ROW_GAP)

    boxes: dict[str, Box] = {}
    for key, kind, members, label in specs:
        h = _TERMINAL_H if kind in ("input", "output") else _BOX_H
        boxes[key] = Box(
            key=key, kind=kind, members=members, label=label, layer=layer[key],
            x=round(centre[key] - _BOX_W / 2 + offset, 1),
            y=round(row_top(layer[key]) + (_BOX_H - h) / 2, 1), w=_BOX_W, h=h,
        )

    per_run = report.copies_per_run
    edges: list[Edge] = []
    for (a, b), values in unit_edges.items():
        top, bottom = boxes[a], boxes[b]
        points = [(top.x + top.w / 2, top.y + top.h)]
        for dummy in lanes[(a, b)]:
            lyr = int(dummy.rsplit("@", 1)[1])
            x = round(centre[dummy] + offset, 1)
            points += [(x, row_top(lyr)), (x, row_top(lyr) + _BOX_H)]
        points.append((bottom.x + bottom.w / 2, bottom.y))
        edges.append(Edge(a, b, tuple(values), _copies_on(per_run, values, top, bottom),
                          tuple(points)))

    all_boxes = tuple(boxes[key] for key, *_ in specs)
    max_right = max((b.x + b.w for b in all_boxes), default=0.0)
    lane_right = max((p[0] for e in edges for p in e.points), default=0.0)
    chain_bottom = max(
        (b.y + _BOX_H + _MEMBER_H * len(b.members) for b in all_boxes if b.kind == "chain"),
        default=0.0,
    )
    lowest = max(row_top(max(layer.values(), default=0)) + _BOX_H, chain_bottom)
    return Layout(all_boxes, tuple(edges), round(max(max_right, lane_right) + _MARGIN, 1),
                  round(lowest + _MARGIN, 1))


# --------------------------------------------------------------------------- drawing


def provider_colours(report: PlacementReport) -> dict[str, str]:
    """Provider → colour: session providers in order, then any others; CPU is grey."""
    colours: dict[str, str] = {}
    for name in [*report.providers_session, *(n.provider for n in report.nodes)]:
        if name not in colours:
            colours[name] = CPU_COLOUR if name == _CPU else PALETTE[len(colours) % len(PALETTE)]
    return colours


def _size(nbytes: int | None) -> str:
    if nbytes is None:
        return "dynamic size"
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024 or unit == "MiB":
            return f"{nbytes} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover - the loop returns


def _tooltip(node: NodePlacement, report: PlacementReport) -> str:
    lines = [node.node, f"op: {node.op_type}", f"provider: {node.provider}"]
    if node.group:
        lines.append(f"fused group: {node.group}")
    for r in report.refusals_for(node.node):
        lines.append(f"refused by {r.provider} [{r.category}]: {r.reason}")
    return "\n".join(lines)


def _path(points: Sequence[tuple[float, float]]) -> str:
    """Straight through lanes, smooth curves between layers."""
    x0, y0 = points[0]
    parts = [f"M{x0:.1f},{y0:.1f}"]
    for (xa, ya), (xb, yb) in zip(points, points[1:]):
        if xa == xb:
            parts.append(f"L{xb:.1f},{yb:.1f}")
        else:
            my = (ya + yb) / 2
            parts.append(f"C{xa:.1f},{my:.1f} {xb:.1f},{my:.1f} {xb:.1f},{yb:.1f}")
    return "".join(parts)


def _svg_edges(layout: Layout) -> list[str]:
    e = html.escape
    out: list[str] = []
    for edge in layout.edges:
        tip = f"{', '.join(edge.values)}"
        cls = "edge"
        if edge.copies:
            cls += " copy"
            tip += "".join(
                f"\ncopy {c.value!r}: {c.src} → {c.dst}, {_size(c.nbytes)} per run"
                for c in edge.copies
            )
        out.append(f'<path class="{cls}" d="{_path(edge.points)}" marker-end="url(#arrow)">'
                   f"<title>{e(tip)}</title></path>")
        if edge.copies:
            # On the last stretch: edges fanning out of one node part there.
            (xa, ya), (xb, yb) = edge.points[-2], edge.points[-1]
            nbytes = [c.nbytes for c in edge.copies]
            total = None if None in nbytes else sum(n or 0 for n in nbytes)
            out.append(
                f'<text class="copy-label" x="{(xa + xb) / 2 + 6:.1f}" y="{(ya + yb) / 2 + 4:.1f}">'
                f"⇄ {e(_size(total))}<title>{e(tip)}</title></text>"
            )
    return out


def _svg_node(box: Box, node: NodePlacement, colour: str, report: PlacementReport) -> str:
    e = html.escape
    refused = bool(report.refusals_for(node.node))
    badge = (f'<text class="badge" x="{box.x + box.w - 12:.1f}" y="{box.y + 15:.1f}">!</text>'
             if refused else "")
    return (
        f'<g class="node{" refused" if refused else ""}" data-node="{e(node.node)}" '
        f'data-provider="{e(node.provider)}"><title>{e(_tooltip(node, report))}</title>'
        f'<rect x="{box.x}" y="{box.y}" width="{box.w}" height="{box.h}" rx="5" '
        f'fill="{colour}"/>'
        f'<text class="op" x="{box.x + 8:.1f}" y="{box.y + 18:.1f}">{e(_truncate(node.op_type))}</text>'
        f'<text class="name" x="{box.x + 8:.1f}" y="{box.y + 35:.1f}">{e(_truncate(node.node, 28))}'
        f"</text>{badge}</g>"
    )


def _svg_chain(box: Box, colour: str, report: PlacementReport) -> str:
    e = html.escape
    first, last = box.members[0], box.members[-1]
    tip = "\n".join([box.label, f"provider: {first.provider}",
                     *(f"  {m.node} ({m.op_type})" for m in box.members), "click to expand"])
    rows: list[str] = []
    top = box.y + box.h
    for i, m in enumerate(box.members):
        y = top + i * _MEMBER_H
        rows.append(
            f'<g class="member" data-node="{e(m.node)}" data-provider="{e(m.provider)}">'
            f"<title>{e(_tooltip(m, report))}</title>"
            f'<rect x="{box.x}" y="{y:.1f}" width="{box.w}" height="{_MEMBER_H}" fill="#fff" '
            f'stroke="{colour}"/><rect x="{box.x}" y="{y:.1f}" width="6" height="{_MEMBER_H}" '
            f'fill="{colour}"/><text x="{box.x + 12:.1f}" y="{y + 16:.1f}">'
            f"{e(_truncate(m.op_type + ' · ' + m.node, 27))}</text></g>"
        )
    return (
        f'<g class="chain" data-chain="{e(box.key)}" data-provider="{e(first.provider)}">'
        f"<title>{e(tip)}</title>"
        f'<rect x="{box.x}" y="{box.y}" width="{box.w}" height="{box.h}" rx="5" '
        f'fill="{colour}" class="chain-box"/>'
        f'<rect x="{box.x + 3:.1f}" y="{box.y + 3:.1f}" width="{box.w - 6:.1f}" '
        f'height="{box.h - 6:.1f}" rx="4" fill="none" stroke="#fff" stroke-dasharray="3 2"/>'
        f'<text class="op" x="{box.x + 8:.1f}" y="{box.y + 18:.1f}">{e(_truncate(box.label))}</text>'
        f'<text class="name" x="{box.x + 8:.1f}" y="{box.y + 35:.1f}">'
        f"{e(_truncate(first.node + ' … ' + last.node, 28))}</text>"
        f'<g class="members">{"".join(rows)}</g></g>'
    )


def _svg_terminal(box: Box) -> str:
    e = html.escape
    return (
        f'<g class="terminal {box.kind}" data-value="{e(box.label)}">'
        f"<title>graph {box.kind}: {e(box.label)}</title>"
        f'<rect x="{box.x}" y="{box.y}" width="{box.w}" height="{box.h}" rx="{box.h / 2}"/>'
        f'<text x="{box.x + box.w / 2:.1f}" y="{box.y + 17:.1f}" text-anchor="middle">'
        f"{e(_truncate(box.label, 24))}</text></g>"
    )


def _svg_groups(layout: Layout, report: PlacementReport, colours: dict[str, str]) -> list[str]:
    e = html.escape
    out: list[str] = []
    for g in report.groups:
        members = set(g.nodes)
        boxes = [b for b in layout.boxes if any(m.node in members for m in b.members)]
        if not boxes:
            continue
        pad = 9.0
        x0 = min(b.x for b in boxes) - pad
        y0 = min(b.y for b in boxes) - pad
        x1 = max(b.x + b.w for b in boxes) + pad
        y1 = max(b.y + b.h for b in boxes) + pad + 12
        out.append(
            f'<g class="group" data-group="{e(g.name)}"><title>fused group {e(g.name)} on '
            f"{e(g.provider)}: {len(g.nodes)} nodes</title>"
            f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" rx="8" '
            f'stroke="{colours.get(g.provider, CPU_COLOUR)}"/>'
            # Bottom left: edges enter a group at the top, mostly near the middle.
            f'<text x="{x0 + 6:.1f}" y="{y1 - 5:.1f}">{e(_truncate(g.name, 60))}</text></g>'
        )
    return out


def render_svg(report: PlacementReport, graph: GraphLike) -> str:
    """The graph picture alone: an ``<svg id="placement-graph">`` element."""
    layout = layout_graph(report, graph)
    colours = provider_colours(report)
    boxes: list[str] = []
    chains: list[str] = []
    for box in layout.boxes:
        if box.kind == "node":
            node = box.members[0]
            boxes.append(_svg_node(box, node, colours.get(node.provider, CPU_COLOUR), report))
        elif box.kind == "chain":
            colour = colours.get(box.members[0].provider, CPU_COLOUR)
            chains.append(_svg_chain(box, colour, report))
        else:
            boxes.append(_svg_terminal(box))
    return (
        f'<svg id="placement-graph" viewBox="0 0 {layout.width} {layout.height}" '
        f'data-width="{layout.width}" data-height="{layout.height}" role="img" '
        f'aria-label="placement graph">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="9" '
        'markerHeight="9" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" '
        'fill="#666"/></marker></defs>'
        f'<g id="viewport">{"".join(_svg_groups(layout, report, colours))}'
        f'{"".join(_svg_edges(layout))}{"".join(boxes)}'
        # Chains last: an open chain lists its nodes over whatever lies below it.
        f'<g id="chains">{"".join(chains)}</g></g></svg>'
    )


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
.chip { color: #fff; padding: 2px 8px; border-radius: 4px; margin-right: 6px;
        display: inline-block; }
.key { display: inline-block; margin-right: 14px; font-size: 90%; }
.block { border: 3px solid; border-radius: 6px; margin: 0 auto; max-width: 900px; }
.head { color: #fff; padding: 4px 8px; font-weight: bold; }
.flow-node { display: inline-block; border: 1px solid #ccc; border-radius: 4px; margin: 4px;
        padding: 2px 6px; font-size: 90%; }
.arrow { text-align: center; font-size: 150%; }
#placement-summary { line-height: 1.9; }
#placement-summary .count { margin-right: 14px; }
.warning { color: #a40000; }
details.section { margin: 0.4em 0; }
details.section > summary { font-size: 125%; font-weight: bold; cursor: pointer; padding: 4px 0; }
details.section[open] > summary { margin-bottom: 0.5em; }
pre.report { white-space: pre-wrap; font-size: 90%; }
table { border-collapse: collapse; margin-bottom: 1em; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
.controls { margin: 6px 0; }
.controls button { margin-right: 6px; }
#placement-graph { width: 100%; height: 75vh; border: 1px solid #ccc; background: #fafafa;
        cursor: grab; user-select: none; touch-action: none; }
#placement-graph.dragging { cursor: grabbing; }
#placement-graph text { font-size: 12px; }
#placement-graph .node text, #placement-graph .chain-box ~ text { fill: #fff; }
#placement-graph text.op { font-weight: bold; }
#placement-graph text.name { font-size: 11px; }
#placement-graph .badge { fill: #fff; font-weight: bold; font-size: 14px; }
#placement-graph .node.refused rect { stroke: #222; stroke-width: 2; stroke-dasharray: 4 2; }
#placement-graph .terminal rect { fill: #fff; stroke: #555; }
#placement-graph .edge { fill: none; stroke: #888; stroke-width: 1.4; }
#placement-graph .edge.copy { stroke: @COPY@; stroke-width: 2.4; stroke-dasharray: 6 3; }
#placement-graph .copy-label { fill: @COPY@; font-weight: bold; font-size: 11px;
        paint-order: stroke; stroke: #fafafa; stroke-width: 3px; }
#placement-graph .group rect { fill: none; stroke-width: 2; stroke-dasharray: 8 4; }
#placement-graph .group text { font-size: 11px; fill: #555; }
#placement-graph .chain { cursor: pointer; }
#placement-graph .chain .members { display: none; }
#placement-graph .chain.open .members { display: inline; }
#placement-graph .member text { fill: #222; font-size: 11px; }
""".replace("@COPY@", _COPY_COLOUR)

# Zoom (wheel, around the cursor), pan (drag), fit, and opening chains on click. The
# view is the SVG viewBox; the drawing's size comes from data-width/data-height.
# "#expand" in the address opens every chain at load. Sets data-ready="1" when done.
_SCRIPT = """
(function () {
  "use strict";
  var svg = document.getElementById("placement-graph");
  if (!svg) { return; }
  var cw = parseFloat(svg.getAttribute("data-width"));
  var ch = parseFloat(svg.getAttribute("data-height"));
  var view = { x: 0, y: 0, s: 1 };
  function size() {
    var r = svg.getBoundingClientRect();
    return { w: r.width || 800, h: r.height || 600, left: r.left, top: r.top };
  }
  function apply() {
    var z = size();
    svg.setAttribute("viewBox", [view.x, view.y, z.w / view.s, z.h / view.s].join(" "));
  }
  function centre(s, top) {
    var z = size();
    view.s = s;
    view.x = -(z.w / s - cw) / 2;
    view.y = top ? 0 : -(z.h / s - ch) / 2;
    apply();
  }
  function fit() { var z = size(); centre(Math.min(2, z.w / cw, z.h / ch), false); }
  function start() {
    var z = size();
    var s = Math.min(1, z.w / cw);
    if (ch * s <= z.h) { fit(); } else { centre(s, true); }
  }
  svg.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var z = size();
    var px = ev.clientX - z.left, py = ev.clientY - z.top;
    var ux = view.x + px / view.s, uy = view.y + py / view.s;
    view.s = Math.max(0.02, Math.min(8, view.s * Math.exp(-ev.deltaY * 0.0015)));
    view.x = ux - px / view.s;
    view.y = uy - py / view.s;
    apply();
  }, { passive: false });
  var drag = null, moved = false;
  svg.addEventListener("pointerdown", function (ev) {
    drag = { x: ev.clientX, y: ev.clientY };
    moved = false;
  });
  svg.addEventListener("pointermove", function (ev) {
    if (!drag) { return; }
    var dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (!moved && Math.abs(dx) + Math.abs(dy) < 4) { return; }
    if (!moved) { svg.setPointerCapture(ev.pointerId); svg.classList.add("dragging"); }
    moved = true;
    view.x -= dx / view.s;
    view.y -= dy / view.s;
    drag = { x: ev.clientX, y: ev.clientY };
    apply();
  });
  function endDrag() { drag = null; svg.classList.remove("dragging"); }
  svg.addEventListener("pointerup", endDrag);
  svg.addEventListener("pointercancel", endDrag);
  var chains = Array.prototype.slice.call(svg.querySelectorAll(".chain"));
  function setOpen(g, open) {
    g.classList.toggle("open", open);
    if (open) { g.parentNode.appendChild(g); }
  }
  chains.forEach(function (g) {
    g.addEventListener("click", function () {
      if (!moved) { setOpen(g, !g.classList.contains("open")); }
    });
  });
  function on(id, f) { var b = document.getElementById(id); if (b) { b.addEventListener("click", f); } }
  on("graph-fit", fit);
  on("graph-actual", function () { centre(1, true); });
  on("graph-expand", function () { chains.forEach(function (g) { setOpen(g, true); }); });
  on("graph-collapse", function () { chains.forEach(function (g) { setOpen(g, false); }); });
  window.addEventListener("resize", apply);
  if (window.location.hash === "#expand") { chains.forEach(function (g) { setOpen(g, true); }); }
  start();
  svg.setAttribute("data-ready", "1");
})();
"""


def _flow_blocks(report: PlacementReport) -> list[tuple[str, list[NodePlacement]]]:
    """Consecutive nodes on one provider, in execution order."""
    blocks: list[tuple[str, list[NodePlacement]]] = []
    for n in report.nodes:
        if blocks and blocks[-1][0] == n.provider:
            blocks[-1][1].append(n)
        else:
            blocks.append((n.provider, [n]))
    return blocks


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    e = html.escape
    if not rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{e('' if v is None else str(v))}</td>" for v in r) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _plural(count: int, noun: str, nouns: str = "") -> str:
    """``"1 node"``, ``"2 nodes"`` (``nouns`` for an irregular plural)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def _summary(report: PlacementReport, colours: dict[str, str]) -> str:
    """The page's opening: nodes per provider (doubling as the colour legend), then
    partitions, copies and refusals counted; fallbacks and ineffective options in full,
    since each means the session is not what was asked for."""
    e = html.escape
    per_provider = report.nodes_by_provider()
    chips = "".join(
        f'<span class="count"><span class="chip" style="background:{c}">{e(p)}</span>'
        f"{_plural(len(per_provider.get(p, [])), 'node')}</span>"
        for p, c in colours.items()
    )
    per_run = report.copies_per_run
    copies = _plural(len(per_run), "copy", "copies") + " per run"
    if per_run:
        unknown = sum(1 for c in per_run if c.nbytes is None)
        copies += f" ({_size(report.copy_bytes_per_run)}" + (
            f", {unknown} of dynamic size)" if unknown else ")")
    categories = ", ".join(
        f"{cat}: {n}" for cat, n in Counter(r.category for r in report.refusals).items()
    )
    refusals = _plural(len(report.refusals), "refusal") + (f" ({categories})" if categories else "")
    counts = [
        _plural(len(report.nodes), "node"),
        _plural(report.partitions, "partition"),
        copies,
        refusals,
    ]
    if report.specializations:
        counts.append(_plural(len(report.specializations), "shape specialization"))
    warnings = [f"fallback: {fb.provider} not used: {fb.reason}" for fb in report.fallbacks]
    warnings += [f"option without effect: {note}" for note in report.option_notes]
    return (
        f'<div id="placement-summary"><div>{chips}</div>'
        f'<div>{" &middot; ".join(e(c) for c in counts)}</div>'
        + "".join(f'<div class="warning">{e(w)}</div>' for w in warnings)
        + "</div>"
    )


def _section(key: str, title: str, body: str) -> str:
    """A collapsed section of the details below the picture."""
    return (f'<details class="section" id="{key}"><summary>{html.escape(title)}</summary>'
            f"{body}</details>")


def render_html(report: PlacementReport, graph: GraphLike, title: str) -> str:
    """A self-contained page (inline SVG, CSS and script; no network) showing ``report``.

    The summary and the picture come first; the full text report, the partitions and the
    tables of nodes, groups, copies, refusals and fallbacks follow as collapsed sections.
    ``graph`` gives the edges (the report holds nodes, not edges): pass the session's
    graph, whose node names are the report's. The result depends only on the arguments.
    """
    e = html.escape
    colours = provider_colours(report)
    keys = (
        f'<span class="key"><svg width="34" height="10"><line x1="0" y1="5" x2="34" y2="5" '
        f'stroke="{_COPY_COLOUR}" stroke-width="2.4" stroke-dasharray="6 3"/></svg> '
        "copy between memory spaces (per run)</span>"
        '<span class="key"><svg width="34" height="14"><rect x="1" y="1" width="32" height="12" '
        'rx="3" fill="none" stroke="#555" stroke-width="2" stroke-dasharray="8 4"/></svg> '
        "fused group</span>"
        f'<span class="key">{MIN_CHAIN}+ nodes in a run: one box, click to open</span>'
    )
    flow: list[str] = []
    for i, (provider, nodes) in enumerate(_flow_blocks(report)):
        if i:
            flow.append('<div class="arrow">&#8595;</div>')
        chips = "".join(
            f'<span class="flow-node" title="{e(n.op_type)}{" in " + e(n.group) if n.group else ""}">'
            f"{e(n.node)} <small>{e(n.op_type)}</small></span>"
            for n in nodes
        )
        flow.append(
            f'<div class="block" style="border-color:{colours[provider]}">'
            f'<div class="head" style="background:{colours[provider]}">{e(provider)} '
            f"&middot; {len(nodes)} node(s)</div>{chips}</div>"
        )
    bar_total = max(len(report.nodes), 1)
    bar_parts, x = [], 0.0
    for provider, nodes in _flow_blocks(report):
        w = 1000.0 * len(nodes) / bar_total
        bar_parts.append(
            f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="24" fill="{colours[provider]}">'
            f"<title>{e(provider)}: {len(nodes)} node(s)</title></rect>"
        )
        x += w
    bar = ('<svg class="bar" viewBox="0 0 1000 24" width="100%" height="24" '
           f'role="img">{"".join(bar_parts)}</svg>')
    node_rows = "".join(
        f"<tr><td>{i}</td><td>{e(n.node)}</td><td>{e(n.op_type)}</td>"
        f'<td><span class="chip" style="background:{colours[n.provider]}">{e(n.provider)}'
        f"</span></td><td>{e(n.group or '')}</td></tr>"
        for i, n in enumerate(report.nodes)
    )
    text_report = e("\n".join(report.summary_lines()))
    groups = _table(
        ["group", "provider", "nodes", "inputs", "outputs"],
        [(g.name, g.provider, len(g.nodes), ", ".join(g.inputs), ", ".join(g.outputs))
         for g in report.groups],
    )
    copies = _table(
        ["value", "from", "to", "bytes", "per run"],
        [(c.value, f"{c.src} ({c.src_provider})", f"{c.dst} ({c.dst_provider})",
          "dynamic" if c.nbytes is None else c.nbytes, "yes" if c.per_run else "at creation")
         for c in report.copies],
    )
    refusals = _table(["node", "op", "provider", "category", "reason"],
                      [(r.node, r.op_type, r.provider, r.category, r.reason)
                       for r in report.refusals])
    fallbacks = _table(["provider", "reason", "fix"],
                       [(f.provider, f.reason, f.fix) for f in report.fallbacks])
    sections = [
        _section("details-report", "Report as text", f'<pre class="report">{text_report}</pre>'),
        _section("details-partitions",
                 "Partitions in execution order", bar + "".join(flow)),
        _section("details-nodes", f"Nodes ({len(report.nodes)})",
                 "<table><tr><th>#</th><th>node</th><th>op</th><th>provider</th><th>group</th>"
                 f"</tr>{node_rows}</table>"),
        _section("details-groups", f"Fused groups ({len(report.groups)})", groups),
        _section("details-copies", f"Copies ({len(report.copies)})", copies),
        _section("details-refusals", f"Refusals ({len(report.refusals)})", refusals),
        _section("details-fallbacks", f"Fallbacks ({len(report.fallbacks)})", fallbacks),
    ]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<style>{_STYLE}</style></head><body>
<h1>{e(title)}</h1>
{_summary(report, colours)}
<p>{keys}</p>
<div class="controls"><button id="graph-fit" type="button">fit</button><button
 id="graph-actual" type="button">1:1</button><button id="graph-expand"
 type="button">open all runs</button><button id="graph-collapse"
 type="button">close all runs</button> <small>wheel: zoom &middot; drag: pan &middot;
 hover: details</small></div>
{render_svg(report, graph)}
<h2>Details</h2>
{"".join(sections)}
<script>{_SCRIPT}</script>
</body></html>
"""
