"""The compiler hook: IREE compilation that keeps section names.

``compile`` returns a :class:`CompiledProgram` (the .vmfb bytes and its section
map). Attributes load on first use, so that ``compiler.targets`` (the known
target names, used by the CLI's ``--help``) does not import ``iree.compiler``.
"""

from sectionmark.lazy import lazy_attributes

__all__ = ["compile", "CompiledProgram", "TARGET_FLAGS"]

_LAZY = {
    "compile": ("sectionmark.compiler.pipeline", "compile"),
    "CompiledProgram": ("sectionmark.compiler.pipeline", "CompiledProgram"),
    "TARGET_FLAGS": ("sectionmark.compiler.targets", "TARGET_FLAGS"),
}
__getattr__ = lazy_attributes(__name__, globals(), _LAZY)
