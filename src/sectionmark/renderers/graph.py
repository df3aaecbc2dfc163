"""Read/write graph of a profiled program: dispatches and the tensors passed between them.

Nodes are the dispatch sites that ran (clustered by their main section,
labelled with export name, busy time per call and bytes moved per execution)
and the program's inputs, parameters, constants and outputs. An edge is a
tensor, labelled with the slice read (shape, dtype, bytes); a tensor read by
several dispatches is drawn bold and red with "read by N" on each of its
edges. Everything comes from the section map's per-site bindings
(docs/section-map.md), so the graph is exact to the slices the compiler saw.

Outputs by suffix: ``.dot`` (Graphviz text, needs nothing), ``.svg`` (runs
Graphviz's ``dot``: ``apt-get install graphviz`` on Debian/Ubuntu, ``brew
install graphviz`` on macOS), ``.html`` (one self-contained file, no network:
the SVG inline when ``dot`` is present, else a linked list of dispatches and
the tensors they read and write).

Graphviz is bounded: a graph it cannot read (a name longer than its 16,384-
character strings, a NUL), one too big to lay out quickly (over
``graphviz.GRAPHVIZ_MAX_LINES`` lines of DOT: nodes, edges, clusters), or a ``dot`` that fails or runs
past ``graphviz.GRAPHVIZ_TIMEOUT_S`` gives sectionmark's own layered layout instead
(`layered_svg`, linear in the graph, which draws any name), saying why.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Union

from sectionmark.artifacts.graphviz import INSTALL_HINT, graphviz_available, graphviz_svg
from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike, write_atomic
from sectionmark.section_path import UNMARKED, format_path
from sectionmark.profiling.kernels import KernelRow, kernels
from sectionmark.renderers.kernels import format_bytes, format_sections
from sectionmark.renderers.table import format_ns
from sectionmark.profiling.timeline import session_colors
from sectionmark.section_map import UNMARKED_COLOR, Binding, css_color

EXTENSION = ".dot"
SITE_PREFIX = "site "


_SITE_RESULT = re.compile(rf"{SITE_PREFIX}(\d+) #\d+")


def producer_site(binding: Binding) -> int | None:
    """The site whose result the binding reads (``site 3 #0`` -> 3), None for program inputs (any other name)."""
    match = _SITE_RESULT.fullmatch(binding.tensor)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class GraphEdge:
    """One tensor passed along: from a node to a node (``s<site>`` dispatch sites, ``t<n>`` program values)."""

    source: str
    target: str
    label: tuple[str, ...]  # lines: the slice (dtype[shape] bytes), then "read by N" for a shared read
    shared: bool  # the tensor is read by several dispatches


@dataclass
class ReadWriteGraph:
    """The graph every form of this renderer draws: the same nodes and edges in DOT, SVG and HTML."""

    sites: list[KernelRow]  # the dispatch sites that ran, in execution order
    values: dict[str, tuple[str, bool]]  # program value node id -> (name, is an output), in order of first use
    edges: list[GraphEdge]


def read_write_graph(session) -> ReadWriteGraph:
    """Dispatch sites and the program's values joined by the tensors each site reads and writes."""
    rows = kernels(session)
    ran = {row.site for row in rows}
    readers = Counter(binding.tensor for row in rows for binding in row.bindings if binding.access != "write")
    values: dict[str, tuple[str, bool]] = {}
    node_of: dict[str, str] = {}
    edges: list[GraphEdge] = []

    def value_node(name: str, output: bool) -> str:
        if name not in node_of:
            node_of[name] = node = f"t{len(values)}"
            values[node] = (name, output)
        return node_of[name]

    for row in rows:
        for binding in row.bindings:
            if binding.access != "write":
                producer = producer_site(binding)
                source = f"s{producer}" if producer in ran else value_node(binding.tensor, False)
                shared = readers[binding.tensor] > 1
                label = (_tensor_label(binding, binding.read_bytes),) + ((f"read by {readers[binding.tensor]}",)
                                                                         if shared else ())
                edges.append(GraphEdge(source, f"s{row.site}", label, shared))
            for output in binding.outputs:
                edges.append(GraphEdge(f"s{row.site}", value_node(output, True),
                                       (_tensor_label(binding, binding.written_bytes),), False))
    return ReadWriteGraph(rows, values, edges)


def main_section(row: KernelRow) -> str:
    """The section a site is grouped and coloured by: its first share's path, or "(unmarked)"."""
    return format_path(row.sections[0][0]) if row.sections else UNMARKED


def site_label(row: KernelRow, calls: int) -> list[str]:
    """A dispatch node's lines: site and export, its sections, time per call, bytes, data movement."""
    label = [f"site {row.site}: {row.key}", format_sections(row),
             f"{format_ns(row.busy_ns / calls)}/call, {row.dispatches / calls:g} exec",
             f"R {format_bytes(row.read_bytes)}  W {format_bytes(row.written_bytes)}"]
    return label + (["data movement"] if row.data_movement else [])


def render(session) -> str:
    """The graph as Graphviz DOT text."""
    graph = read_write_graph(session)
    calls = max(session.calls, 1)
    lines = ["digraph sectionmark {", '  rankdir=TB; node [shape=box, fontname="Helvetica", fontsize=9];',
             '  edge [fontname="Helvetica", fontsize=8];']
    clusters: dict[str, list[KernelRow]] = {}
    for row in graph.sites:
        clusters.setdefault(main_section(row), []).append(row)
    for index, (name, members) in enumerate(clusters.items()):
        lines.append(f"  subgraph cluster_{index} {{ label={_quote(name)}; style=rounded; color=grey60;")
        for row in members:
            style = ', style=filled, fillcolor="#FDE2C8"' if row.data_movement else ""
            lines.append(f"    s{row.site} [label={_quote(*site_label(row, calls))}{style}];")
        lines.append("  }")
    for node, (name, output) in graph.values.items():
        shape = "doubleoctagon" if output else "ellipse"
        lines.append(f"  {node} [label={_quote(name)}, shape={shape}, style=filled, fillcolor=\"#E8F0FE\"];")
    for edge in graph.edges:
        style = ', color="#C5221F", penwidth=2' if edge.shared else ""
        lines.append(f"  {edge.source} -> {edge.target} [label={_quote(*edge.label)}{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


NODE_WIDTH, LINE_HEIGHT, NODE_PADDING, LAYER_GAP, NODE_GAP = 230, 13, 6, 44, 16
LABEL_CHARACTERS = 36  # characters of a line drawn in a node (the whole label is its hover title)


def report_colors(session) -> dict[str, str]:
    """A CSS colour per section name as the report shows it ("Block 0/MLP"; "(unmarked)" grey): the section's
    colour in every view (`sectionmark.profiling.timeline.session_colors`)."""
    colors = session_colors(session)
    return {row.name: css_color(colors[row.path]) for row in session.sections}


@dataclass
class _Node:
    node: str  # s<site> or t<n>
    lines: list[str]  # drawn
    title: str  # hover
    color: str
    kind: str  # "site", "input" or "output"
    data_movement: bool = False
    layer: int = 0
    x: float = 0.0
    height: float = 0.0


def layered_svg(session, colors: Optional[dict[str, str]] = None) -> str:
    """The read/write graph drawn without Graphviz: a layered layout computed here, as inline SVG.

    Each node sits one layer below the lowest node it reads from (program
    inputs one layer above their first reader), so every edge points down;
    within a layer, nodes are ordered by the mean position of what they read
    (one barycentre sweep), then pushed apart to not overlap. Linear in nodes
    and edges: a 2,000-site graph lays out in milliseconds. Nodes carry
    ``data-node`` (the DOT node id) and edges ``data-source`` / ``data-target``,
    the same edges as `render`'s DOT.
    """
    graph = read_write_graph(session)
    calls = max(session.calls, 1)
    colors = colors or report_colors(session)
    nodes: dict[str, _Node] = {}
    for node, (name, output) in graph.values.items():
        nodes[node] = _Node(node, [name], name, "#E8F0FE", "output" if output else "input")
    for row in graph.sites:
        label = site_label(row, calls)
        nodes[f"s{row.site}"] = _Node(f"s{row.site}", label, "\n".join(label), colors.get(main_section(row), css_color(UNMARKED_COLOR)),
                                      "site", row.data_movement)
    sources: dict[str, list[str]] = {node: [] for node in nodes}
    targets: dict[str, list[str]] = {node: [] for node in nodes}
    for edge in graph.edges:
        sources[edge.target].append(edge.source)
        targets[edge.source].append(edge.target)
    # Layers: sites in execution order (a site reads only earlier sites), inputs above their first reader.
    for row in graph.sites:
        node = nodes[f"s{row.site}"]
        node.layer = 1 + max((nodes[s].layer for s in sources[node.node] if nodes[s].kind == "site"), default=0)
    for node in nodes.values():
        if node.kind == "input":
            node.layer = min((nodes[t].layer for t in targets[node.node]), default=1) - 1
        elif node.kind == "output":
            node.layer = 1 + max((nodes[s].layer for s in sources[node.node]), default=0)
    layers: dict[int, list[_Node]] = {}
    for node in nodes.values():
        node.height = len(node.lines) * LINE_HEIGHT + 2 * NODE_PADDING
        layers.setdefault(node.layer, []).append(node)
    top, y_of = 0.0, {}
    for layer in sorted(layers):
        members = layers[layer]
        wanted = {}
        for index, node in enumerate(members):
            placed = [nodes[s].x for s in sources[node.node] if nodes[s].layer < layer]
            wanted[node.node] = sum(placed) / len(placed) if placed else index * (NODE_WIDTH + NODE_GAP)
        members.sort(key=lambda node: wanted[node.node])
        right = float("-inf")
        for node in members:
            node.x = max(wanted[node.node], right + NODE_WIDTH + NODE_GAP)
            right = node.x
        y_of[layer] = top
        top += max(node.height for node in members) + LAYER_GAP
    left = min(node.x for node in nodes.values()) if nodes else 0.0
    width = (max(node.x for node in nodes.values()) - left + NODE_WIDTH + 2 * NODE_GAP) if nodes else NODE_WIDTH
    parts = [f'<svg class="rw-graph" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{top:.0f}" '
             f'viewBox="0 0 {width:.0f} {top:.0f}" font-family="sans-serif" font-size="10">',
             '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
             'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>']

    def box(node: _Node) -> tuple[float, float]:
        return node.x - left + NODE_GAP, y_of[node.layer]

    for edge in graph.edges:
        (sx, sy), (tx, ty) = box(nodes[edge.source]), box(nodes[edge.target])
        x1, y1 = sx + NODE_WIDTH / 2, sy + nodes[edge.source].height
        x2, y2 = tx + NODE_WIDTH / 2, ty
        bend = (y2 - y1) / 2
        style = 'stroke="#C5221F" stroke-width="2"' if edge.shared else 'stroke="#777" stroke-width="1"'
        parts.append(f'<path class="edge" data-source="{edge.source}" data-target="{edge.target}" fill="none" {style} '
                     f'marker-end="url(#arrow)" d="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} '
                     f'{x2:.1f},{y2:.1f}"><title>{_text(" ".join(edge.label))}</title></path>')
    for node in nodes.values():
        x, y = box(node)
        stroke = 'stroke="#E8710A" stroke-width="2" stroke-dasharray="5 3"' if node.data_movement else 'stroke="#555"'
        shape = (f'<rect width="{NODE_WIDTH}" height="{node.height:.0f}" rx="{node.height / 2 if node.kind != "site" else 4:.0f}" '
                 f'fill="{node.color}" fill-opacity="{0.35 if node.kind == "site" else 1}" {stroke}/>')
        text = "".join(f'<text x="6" y="{NODE_PADDING + (i + 1) * LINE_HEIGHT - 3}">{_text(_shorten(line))}</text>'
                       for i, line in enumerate(node.lines))
        classes = f"node {node.kind}" + (" data-movement" if node.data_movement else "")
        parts.append(f'<g class="{classes}" data-node="{node.node}" transform="translate({x:.1f},{y:.1f})">'
                     f"<title>{_text(node.title)}</title>{shape}{text}</g>")
    parts.append("</svg>")
    return "".join(parts)


def _shorten(line: str) -> str:
    return line if len(line) <= LABEL_CHARACTERS else line[: LABEL_CHARACTERS - 1] + "…"


def _text(value: str) -> str:
    """Text escaped for SVG or HTML markup (both inside elements and in attribute values)."""
    return html.escape(value, quote=True)


def save(session, path: Union[str, Path], inputs: Iterable[PathLike] = ()) -> Path:
    """Write the graph as .dot, .svg or .html (by suffix, checked by `sectionmark.renderers.save`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    dot_text = render(session)
    if suffix == ".dot":
        return write_atomic(path, dot_text, inputs)
    if suffix == ".svg":
        if not graphviz_available():
            written = write_atomic(path.with_suffix(".dot"), dot_text, inputs)
            raise SectionmarkError(f"no Graphviz 'dot' program for {path.name}: wrote {written} instead; {INSTALL_HINT}")
        svg, why_not = graphviz_svg(dot_text)
        if svg is None:  # an XML comment says why (a comment holds no "--")
            svg = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!-- {why_not.replace('--', '- -')}: drawn with "
                   f"sectionmark's own layered layout -->\n{layered_svg(session)}\n")
        return write_atomic(path, svg, inputs)
    return write_atomic(path, to_html(session, dot_text), inputs)


def to_html(session, dot_text: str) -> str:
    """One self-contained page: the SVG inline (Graphviz's when present and able), always the dispatch list."""
    svg, why_not = graphviz_svg(dot_text) if graphviz_available() else (
        None, f"No Graphviz here ({INSTALL_HINT})")
    if svg is not None:
        figure = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: inline SVG in HTML
    else:
        figure = (f"<p>{html.escape(why_not)}: drawn with sectionmark's own layered layout. "
                  f"The list below has the same edges.</p>{layered_svg(session)}")
    items = []
    for row in kernels(session):
        reads = "".join(
            f"<li>{'&larr;' if b.access != 'write' else '&rarr;'} {_link(b)} {html.escape(b.dtype)}"
            f"[{'x'.join(map(str, b.shape))}] {html.escape(b.access)}, {format_bytes(b.read_bytes or b.written_bytes)}</li>"
            for b in row.bindings)
        mark = " <b>data movement</b>" if row.data_movement else ""
        items.append(f'<li id="site{row.site}"><b>site {row.site}</b> {html.escape(row.key)}{mark} — '
                     f"{html.escape(format_sections(row))}, {format_ns(row.time_per_dispatch_ns)}/exec"
                     f"<ul>{reads}</ul></li>")
    title = html.escape(f"sectionmark read/write graph: {session.function or 'profile'}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>"
            "<style>body{font-family:sans-serif;font-size:13px} svg{max-width:100%;height:auto}</style>"
            f"</head><body><h1>{title}</h1>{figure}<h2>Dispatches in execution order</h2><ol>{''.join(items)}</ol>"
            "</body></html>\n")


def _link(binding: Binding) -> str:
    producer = producer_site(binding)
    name = html.escape(binding.tensor)
    return f'<a href="#site{producer}">{name}</a>' if producer is not None else name


def _tensor_label(binding: Binding, size) -> str:
    return f"{binding.dtype}[{'x'.join(str(s) if s >= 0 else '?' for s in binding.shape)}] {format_bytes(size)}"


def _quote(*lines: str) -> str:
    """A DOT string literal of ``lines`` (each escaped, joined by DOT's ``\\n`` line break)."""
    return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'
