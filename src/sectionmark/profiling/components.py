"""Component view: sections with the same name summed across repeated blocks.

A transformer marks "Self Attention" once per layer, so the section table has
twelve "Self Attention" rows under twelve "Block i" parents. The component view
answers "how much of the run is attention?" with one row per name.

Which time it shows (stated in every renderer):

* ``by="name"`` groups every section by its last path element and sums the
  sections' *exclusive* busy time (their own time, nested sections counted in
  their own components). Every dispatch nanosecond lands in exactly one
  component or in "(unmarked)", so shares add up to 100%.
* ``by="<pattern>"`` (``fnmatch`` on the "/"-joined path, e.g.
  ``"*/Self Attention"``) sums the *inclusive* busy time of the outermost
  matching sections (a match nested in a match is not counted twice); the
  rest of the run is one "(other)" row, so shares again add up to 100%.

Busy time is the sum of dispatch durations, the same time as the section
table's Busy column (not Tracy replay spans, which include the gaps between
dispatches).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from sectionmark.paths import SectionPath

BY_NAME = "name"
UNMARKED = "(unmarked)"
OTHER = "(other)"


@dataclass
class ComponentStats:
    """One component: the sections it sums and their total."""

    name: str
    sections: list[SectionPath]  # the section rows summed, in report order (empty for the remainder rows)
    busy_ns: float  # summed busy time (exclusive for by="name", inclusive for a pattern)
    share: float  # busy_ns / total busy time of the run
    per_call_ns: float  # busy_ns / measured calls
    mean_per_section_ns: float  # busy_ns / len(sections) / calls: one block's cost per call
    dispatches: int  # dispatch events of the summed sections (inclusive of nested ones)


@dataclass
class ComponentView:
    by: str
    time: str  # which time the rows show, in words
    total_ns: float
    calls: int
    rows: list[ComponentStats]


def components(session, by: str = BY_NAME) -> ComponentView:
    """Group ``session``'s sections into components (see the module docstring)."""
    calls = max(session.calls, 1)
    total = float(session.total_ns)
    named = session.section_rows
    groups: dict[str, list] = {}
    if by == BY_NAME:
        for row in named:
            groups.setdefault(row.path[-1], []).append(row)
        sums = {name: sum(row.exclusive_ns for row in rows) for name, rows in groups.items()}
        time = "exclusive busy time (sum of dispatch durations; nested sections are their own components)"
        remainder_name, remainder = UNMARKED, session.unmarked_ns
    else:
        matches = [row for row in named if fnmatchcase("/".join(row.path), by)]
        matched_paths = {row.path for row in matches}
        outermost = [row for row in matches
                     if not any(row.path[:k] in matched_paths for k in range(1, len(row.path)))]
        for row in outermost:
            groups.setdefault(row.path[-1], []).append(row)
        sums = {name: sum(row.busy_ns for row in rows) for name, rows in groups.items()}
        time = f"inclusive busy time of the outermost sections matching {by!r} (sum of dispatch durations)"
        remainder_name, remainder = OTHER, total - sum(sums.values())
    rows = [
        ComponentStats(
            name=name,
            sections=[row.path for row in members],
            busy_ns=sums[name],
            share=sums[name] / total if total else 0.0,
            per_call_ns=sums[name] / calls,
            mean_per_section_ns=sums[name] / len(members) / calls,
            dispatches=sum(row.dispatches for row in members),
        )
        for name, members in groups.items()
        if by != BY_NAME or sums[name] > 0  # a pure container (e.g. "Block 0") has no time of its own
    ]
    rows.sort(key=lambda row: -row.busy_ns)
    if remainder > 0 or not rows:
        rows.append(ComponentStats(remainder_name, [], remainder, remainder / total if total else 0.0,
                                   remainder / calls, remainder / calls,
                                   session.unmarked.dispatches if remainder_name == UNMARKED else 0))
    return ComponentView(by=by, time=time, total_ns=total, calls=session.calls, rows=rows)
