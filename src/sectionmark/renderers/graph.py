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
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Iterable, Union

from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike, write_atomic
from sectionmark.section_path import format_path
from sectionmark.profiling.kernels import KernelRow, kernels
from sectionmark.renderers.kernels import format_bytes, format_sections
from sectionmark.renderers.table import format_ns
from sectionmark.section_map import Binding

EXTENSION = ".dot"
INSTALL_HINT = "install Graphviz for SVG (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz)"
SITE_PREFIX = "site "


_SITE_RESULT = re.compile(rf"{SITE_PREFIX}(\d+) #\d+")


def producer_site(binding: Binding) -> int | None:
    """The site whose result the binding reads (``site 3 #0`` -> 3), None for program inputs (any other name)."""
    match = _SITE_RESULT.fullmatch(binding.tensor)
    return int(match.group(1)) if match else None


def render(session) -> str:
    """The graph as Graphviz DOT text."""
    rows = kernels(session)
    ran = {row.site for row in rows}
    calls = max(session.calls, 1)
    readers = Counter(binding.tensor for row in rows for binding in row.bindings if binding.access != "write")
    lines = ["digraph sectionmark {", '  rankdir=TB; node [shape=box, fontname="Helvetica", fontsize=9];',
             '  edge [fontname="Helvetica", fontsize=8];']
    clusters: dict[str, list[KernelRow]] = {}
    for row in rows:
        clusters.setdefault(format_path(row.sections[0][0]) if row.sections else "(unmarked)", []).append(row)
    for index, (name, members) in enumerate(clusters.items()):
        lines.append(f"  subgraph cluster_{index} {{ label={_quote(name)}; style=rounded; color=grey60;")
        for row in members:
            label = [f"site {row.site}: {row.key}", format_sections(row),
                     f"{format_ns(row.busy_ns / calls)}/call, {row.dispatches / calls:g} exec",
                     f"R {format_bytes(row.read_bytes)}  W {format_bytes(row.written_bytes)}"]
            label += ["data movement"] if row.data_movement else []
            style = ', style=filled, fillcolor="#FDE2C8"' if row.data_movement else ""
            lines.append(f"    s{row.site} [label={_quote(*label)}{style}];")
        lines.append("  }")
    program_nodes: dict[str, str] = {}

    def program_node(name: str, shape: str) -> str:
        if name not in program_nodes:
            program_nodes[name] = node = f"t{len(program_nodes)}"
            lines.append(f"  {node} [label={_quote(name)}, shape={shape}, style=filled, fillcolor=\"#E8F0FE\"];")
        return program_nodes[name]

    for row in rows:
        for binding in row.bindings:
            if binding.access != "write":
                producer = producer_site(binding)
                source = f"s{producer}" if producer in ran else program_node(binding.tensor, "ellipse")
                shared = readers[binding.tensor] > 1
                label = [_tensor_label(binding, binding.read_bytes)]
                label += [f"read by {readers[binding.tensor]}"] if shared else []
                style = ', color="#C5221F", penwidth=2' if shared else ""
                lines.append(f"  {source} -> s{row.site} [label={_quote(*label)}{style}];")
            for output in binding.outputs:
                target = program_node(output, "doubleoctagon")
                label = _tensor_label(binding, binding.written_bytes)
                lines.append(f"  s{row.site} -> {target} [label={_quote(label)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def save(session, path: Union[str, Path], inputs: Iterable[PathLike] = ()) -> Path:
    """Write the graph as .dot, .svg or .html (by suffix, checked by `sectionmark.renderers.save`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    dot_text = render(session)
    if suffix == ".dot":
        return write_atomic(path, dot_text, inputs)
    if suffix == ".svg":
        if shutil.which("dot") is None:
            written = write_atomic(path.with_suffix(".dot"), dot_text, inputs)
            raise SectionmarkError(f"no Graphviz 'dot' program for {path.name}: wrote {written} instead; {INSTALL_HINT}")
        return write_atomic(path, to_svg(dot_text), inputs)
    return write_atomic(path, to_html(session, dot_text), inputs)


def to_svg(dot_text: str) -> str:
    """Render DOT text with Graphviz's ``dot -Tsvg``."""
    try:
        done = subprocess.run(["dot", "-Tsvg"], input=dot_text, capture_output=True, encoding="utf-8", errors="replace",
                              timeout=300)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SectionmarkError(f"Graphviz 'dot' failed: {error}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SectionmarkError(f"Graphviz 'dot' failed (exit {done.returncode}): {last}")
    return done.stdout


def to_html(session, dot_text: str) -> str:
    """One self-contained page: the SVG inline when Graphviz is present, always the dispatch list."""
    if shutil.which("dot") is not None:
        svg = to_svg(dot_text)
        figure = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: inline SVG in HTML
    else:
        figure = f"<p>No Graphviz here: {html.escape(INSTALL_HINT)}. The list below has the same edges.</p>"
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
