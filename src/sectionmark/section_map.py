"""The section map: which section(s) every recorded command of a program belongs to.

Written by the compiler hook, read by the profile session. It mirrors what the
runtime counts: per static command buffer, the ordered list of recorded
commands (dispatch, barrier, fill, copy, update; debug groups are not
counted), so that a runtime ``(command_buffer_id, command_index)`` can be
mapped back to a dispatch site and its sections. Schema: docs/section-map.md.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from sectionmark import serialization
from sectionmark.errors import SectionmarkError
from sectionmark.serialization import json_field
from sectionmark.section_path import SectionPath

SECTION_MAP_VERSION = 2
# A .vmfb carries its map as this reflection entry of its first exported
# function: "<SHA-256 of the JSON> <compact JSON>" (written by
# sectionmark.compiler.embed, read by sectionmark.artifacts).
EMBEDDED_KEY = "sectionmark.section_map"
EMBEDDED_JSON_START = '{"version":'  # compact JSON of a map starts so (to_json puts the version first)
WEIGHT_RULE = "cost"  # docs/section-map.md; sites that cannot be sized say "op-count"
COMMAND_OPS = ("dispatch", "barrier", "fill", "copy", "update")
SITE_RULES = ("cost", "op-count", "root")  # DispatchSite.rule
BINDING_ACCESS = ("read", "write", "readwrite")  # Binding.access
FRAMEWORKS = ("torch", "jax", "slice")  # SectionMap.framework (or None)
INITIALIZER_FUNCTION = "__init"  # the VM's name for module initializers (`function` of sites and buffers)
# What a count or size in a map may be (FLOPs, bytes, workgroups, sizes): one a 64-bit machine can have. Bigger
# ones (1e308 FLOPs, a 400-digit byte count) only overflow sums later, into NaN or an OverflowError.
COUNT_BOUNDS = (0, 2**63)
SIZE_BOUNDS = (-1, 2**63)  # a shape's sizes: -1 is a dynamic one
# Section colours (0xRRGGBB) for the sections the code gave none: distinct hues, handed out by
# `section_colors` in the map's order; "(unmarked)" is grey. Every view (HTML, Perfetto, Tracy) uses them.
PALETTE = (0x4C8BF5, 0xF29D38, 0x3DAA5C, 0xD2504B, 0x8E6CC8, 0x8C6454, 0xD96BB9, 0x7F8C8D,
           0xB5BD3A, 0x2EB6C8, 0x1F5FBF, 0xB8651A, 0x217A3C, 0x9E2F2B, 0x5E3F99, 0x5C4035)
UNMARKED_COLOR = 0xBDBDBD


class SectionMapError(SectionmarkError, ValueError):
    """A section map that cannot be read (wrong version, malformed).

    A `SectionmarkError`, the one type the CLI prints as one line; still a
    ValueError for callers that caught it as one before.
    """


@dataclass(frozen=True)
class Share:
    """One section's part of a dispatch site (weights of a site sum to 1).

    ``path == ()`` is the part of ops in no section ("(unmarked)"). ``flops``
    and ``bytes`` are the estimate the weight came from (rule "cost"), per
    execution of the dispatch.
    """

    path: SectionPath
    weight: float
    flops: Optional[float] = json_field(bounds=COUNT_BOUNDS, default=None)
    bytes: Optional[float] = json_field(bounds=COUNT_BOUNDS, default=None)


@dataclass
class Command:
    """One recorded command, in the order the runtime counts it."""

    op: str  # one of COMMAND_OPS
    key: Optional[str] = None  # dispatch: export name as the profiler reports it
    site: Optional[int] = None  # dispatch site id (flow phase); None for barriers
    shares: list[Share] = field(default_factory=list)  # empty: "(unmarked)"
    workgroups: Optional[list[int]] = json_field(bounds=COUNT_BOUNDS, default=None)  # when static
    binding_bytes: Optional[list[int]] = json_field(bounds=COUNT_BOUNDS, default=None)  # when static

    @property
    def sections(self) -> list[SectionPath]:
        return [share.path for share in self.shares]


@dataclass
class CommandBuffer:
    """A static command buffer (memoized or one-shot) in one function."""

    index: int
    function: str
    commands: list[Command] = field(default_factory=list)
    # The ordinal of the device it runs on, in a module compiled for several (the order of --device); absent in a
    # module of one device, or where the compiler does not name it (docs/section-map.md).
    device: Optional[int] = json_field(default=None, omit_none=True, bounds=(0, 1 << 16))

    def signature(self) -> list[tuple[str, Optional[str]]]:
        """The ``(op, key)`` sequence used to match runtime command buffers."""
        return [(command.op, command.key) for command in self.commands]


@dataclass(frozen=True)
class Binding:
    """One tensor a dispatch site reads and/or writes (sectionmark.compiler.bindings).

    ``shape`` is the exact slice the dispatch's body loads or stores (-1: a
    dynamic size), ``tensor_shape`` the whole tensor bound; bytes are per
    execution of the dispatch, None when a size is dynamic.
    """

    tensor: str  # program value: "site 3 #0", "input0", "@global", "constant 0"
    shape: list[int] = json_field(bounds=SIZE_BOUNDS)
    tensor_shape: list[int] = json_field(bounds=SIZE_BOUNDS)
    dtype: str
    access: str  # "read", "write" or "readwrite"
    read_bytes: Optional[int] = json_field(bounds=COUNT_BOUNDS)
    written_bytes: Optional[int] = json_field(bounds=COUNT_BOUNDS)
    outputs: list[str] = field(default_factory=list)  # a written tensor that the function returns: "output0"


@dataclass
class DispatchSite:
    """A dispatch site found at phase flow, before deduplication."""

    id: int
    function: str
    shares: list[Share]
    op_count: int = json_field(bounds=COUNT_BOUNDS)  # counted ops fused into the site (the fallback rule)
    rule: str = WEIGHT_RULE  # how the shares were weighed: "cost", "op-count" or "root"
    executable: Optional[str] = None  # executable after deduplication/linking
    key: Optional[str] = None
    bindings: list[Binding] = field(default_factory=list)  # tensors read/written, in binding order
    flops: Optional[float] = json_field(bounds=COUNT_BOUNDS, default=None)  # per execution (rule "cost" only)


@dataclass
class ModuleFingerprint:
    """What ties a map to its module in a profile (docs/section-map.md, "Module fingerprint").

    IREE's CPU profile lists the executable functions of the loaded module but
    no hash of their code, so the fingerprint is that list: a profile whose
    module has other functions is refused. Modules with the same functions
    (the same model compiled with other section names) cannot be told apart.
    """

    exports: list[str]  # every executable function (export) the module dispatches, sorted


@dataclass
class FunctionSignature:
    """A public function of the compiled program as its caller sees it (docs/section-map.md, "Functions").

    ``arguments``: the element type of each argument as MLIR spells it
    (``f32``, ``i64``, ``ui8``, ``i1``...; torch's ``si64`` is written ``i64``), ``""`` for one that is
    not a tensor. Lets a caller's Python scalars become 0-d arrays of the type
    the function checks for.
    """

    name: str
    arguments: list[str]


@dataclass
class SectionMap:
    sections: list[SectionPath]  # every section the exported program declared, reached or not
    command_buffers: list[CommandBuffer]
    sites: list[DispatchSite]
    weight_rule: str = WEIGHT_RULE
    target: Optional[str] = None
    fingerprint: Optional[ModuleFingerprint] = None  # None: maps built by hand or before fingerprints
    functions: list[FunctionSignature] = field(default_factory=list)  # public functions (empty: maps before them)
    # The exporter of the program ("torch", "jax", "slice"); None for MLIR text or files and maps before it.
    # How pytree arguments are flattened follows it (`sectionmark.arguments`).
    framework: Optional[str] = None
    # Section name -> the colour (0xRRGGBB) the code gave it (``section(name, color=...)``); empty in maps
    # written before it and for sections given none (they take a `PALETTE` colour, `section_colors`).
    colors: dict[str, int] = field(default_factory=dict)
    version: int = SECTION_MAP_VERSION

    def to_json(self) -> dict[str, Any]:
        data = serialization.to_json(self)
        return {"version": data.pop("version"), **data}

    @classmethod
    def from_json(cls, data: Any) -> "SectionMap":
        """Read and validate a map (types, finite non-negative weights summing to 1, known ops, site ids)."""
        section_map = serialization.from_versioned_json(
            cls, data, version=SECTION_MAP_VERSION, document="section map", root="section map",
            advice="recompile the model with this version of sectionmark", error=SectionMapError)
        section_map._validate()
        return section_map

    def _validate(self) -> None:
        """Refuse a map that contradicts itself, so that no renderer meets a value its schema does not allow.

        Enumerated strings must be one of their values (outputs such as the
        HTML graph print them as they are), every share must name a declared
        section path of non-empty names (an undeclared one would be reported
        as a section without dispatches), and a dispatch command must carry
        exactly its site's shares (the compiler copies them; two copies that
        differ would make the table depend on which one is read).
        """
        if self.framework is not None and self.framework not in FRAMEWORKS:
            raise SectionMapError(f"malformed section map: framework: unknown exporter {self.framework!r}")
        for name, color in self.colors.items():
            if not 0 <= color <= 0xFFFFFF:
                raise SectionMapError(f"malformed section map: colors[{name!r}]: {color} is not a colour 0xRRGGBB")
        declared = set(self.sections)
        for i, path in enumerate(self.sections):
            _check_path(path, f"sections[{i}]")
        site_of = {site.id: site for site in self.sites}
        owners = [(f"sites[{i}]", site.shares) for i, site in enumerate(self.sites)]
        for i, site in enumerate(self.sites):
            if site.rule not in SITE_RULES:
                raise SectionMapError(f"malformed section map: sites[{i}].rule: unknown rule {site.rule!r}")
            for j, binding in enumerate(site.bindings):
                if binding.access not in BINDING_ACCESS:
                    raise SectionMapError(f"malformed section map: sites[{i}].bindings[{j}].access: "
                                          f"{binding.access!r} is not one of {', '.join(BINDING_ACCESS)}")
        for b, buffer in enumerate(self.command_buffers):
            for c, command in enumerate(buffer.commands):
                where = f"command_buffers[{b}].commands[{c}]"
                if command.op not in COMMAND_OPS:
                    raise SectionMapError(f"malformed section map: {where}.op: unknown command {command.op!r}")
                if command.site is not None and command.site not in site_of:
                    raise SectionMapError(f"malformed section map: {where}.site: no dispatch site {command.site}")
                owners.append((where, command.shares))
        for where, shares in owners:
            if any(share.weight < 0 for share in shares) or (shares and abs(sum(s.weight for s in shares) - 1) > 1e-6):
                raise SectionMapError(f"malformed section map: {where}.shares: weights must be >= 0 and sum to 1")
            for k, share in enumerate(shares):
                if share.path:
                    _check_path(share.path, f"{where}.shares[{k}].path")
                    if share.path not in declared:
                        raise SectionMapError(f"malformed section map: {where}.shares[{k}].path: "
                                              f"{list(share.path)} is not one of the map's sections")
        for b, buffer in enumerate(self.command_buffers):
            for c, command in enumerate(buffer.commands):
                if command.site is not None and command.shares != site_of[command.site].shares:
                    raise SectionMapError(f"malformed section map: command_buffers[{b}].commands[{c}].shares: "
                                          f"not the shares of its dispatch site {command.site}")

    def argument_types(self, function: str) -> Optional[list[str]]:
        """The element types of ``function``'s arguments; None when the map does not know the function."""
        return next((signature.arguments for signature in self.functions if signature.name == function), None)

    @property
    def reached(self) -> list[SectionPath]:
        """Declared sections that own part of a recorded command (themselves or nested ones), in order."""
        owning = {
            share.path[:depth]
            for buffer in self.command_buffers
            for command in buffer.commands
            for share in command.shares
            for depth in range(1, len(share.path) + 1)
        }
        return [path for path in self.sections if path in owning]

    def dumps(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, indent=1)

    def embedded_text(self) -> str:
        """The map as a module carries it: checksum, a space, compact JSON (see EMBEDDED_KEY)."""
        text = json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"), check_circular=False)  # a tree
        return f"{_digest(text.encode('utf-8'))} {text}"

    @classmethod
    def from_embedded_text(cls, text: bytes, checksummed: bool = True) -> "SectionMap":
        """Read `embedded_text` back, refusing a copy whose checksum does not match.

        ``checksummed=False``: maps embedded before checksums (the JSON alone).
        """
        if checksummed:
            digest, _space, text = text.partition(b" ")
            if digest != _digest(text).encode("ascii"):
                raise SectionMapError("checksum mismatch")
        try:
            return cls.loads(text.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise SectionMapError(f"not UTF-8 text: {error.reason} at byte {error.start}") from None

    @classmethod
    def loads(cls, text: str) -> "SectionMap":
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as error:
            raise SectionMapError(f"section map is not valid JSON: {str(error)[:200]}") from None
        return cls.from_json(data)

    def save(self, path: str | Path) -> None:
        from sectionmark.outputs import write_atomic

        write_atomic(path, self.dumps())

    @classmethod
    def load(cls, path: str | Path) -> "SectionMap":
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise SectionMapError(f"section map is not UTF-8 text: {error.reason} at byte {error.start}") from None
        return cls.loads(text)


def section_colors(paths: Iterable[SectionPath], chosen: Mapping[str, int]) -> dict[SectionPath, int]:
    """One colour (0xRRGGBB) per section, the same in every view: by its name (its path's last), so that the
    blocks' "MLP" sections look alike.

    A name takes the colour the code gave it (``chosen``: `SectionMap.colors`), else the next `PALETTE`
    colour in order of first appearance in ``paths`` (the map's section order, which every view of a profile
    shares), leaving out palette colours close to a chosen one (each channel within `_CLOSE`): sections then
    look distinct. The unmarked path ``()`` is `UNMARKED_COLOR`.
    """
    palette = [color for color in PALETTE if not any(_close(color, given) for given in chosen.values())] or PALETTE
    by_name: dict[str, int] = {}
    colors = {(): UNMARKED_COLOR}
    handed_out = 0
    for path in paths:
        if not path:
            continue
        name = path[-1]
        if name not in by_name:
            if name in chosen:
                by_name[name] = chosen[name]
            else:
                by_name[name] = palette[handed_out % len(palette)]
                handed_out += 1
        colors[path] = by_name[name]
    return colors


_CLOSE = 0x20  # two colours whose every channel differs by at most this look alike


def _close(a: int, b: int) -> bool:
    return all(abs((a >> shift & 0xFF) - (b >> shift & 0xFF)) <= _CLOSE for shift in (16, 8, 0))


def css_color(color: int) -> str:
    """``0x4C8BF5`` as ``"#4C8BF5"``."""
    return f"#{color:06X}"


def sidecar_path(vmfb_path: str | Path) -> Path:
    """Where a module's map is saved beside it: ``model.vmfb`` -> ``model.sections.json``."""
    path = Path(vmfb_path)
    return path.with_name(path.stem + ".sections.json")


def _check_path(path: SectionPath, where: str) -> None:
    if not path or not all(path):
        raise SectionMapError(f"malformed section map: {where}: a section path is a list of non-empty names")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def device_section_map(section_map: SectionMap, ordinal: int) -> SectionMap:
    """The map a device's events are placed in: its command buffers where the map says which device runs each
    (`CommandBuffer.device`), so that buffers of several devices recording the same commands for different
    sections (each device's layer of a pipeline) are told apart; the whole map where it does not say."""
    if all(buffer.device is None for buffer in section_map.command_buffers):
        return section_map
    return replace(section_map, command_buffers=[buffer for buffer in section_map.command_buffers
                                                 if buffer.device in (None, ordinal)])
