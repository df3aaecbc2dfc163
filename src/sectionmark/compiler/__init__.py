"""The compiler hook: IREE compilation that keeps section names (issue B).

``compile`` returns a :class:`CompiledModule` (the .vmfb bytes and its
section map); ``read_section_map`` gets the map back from a saved .vmfb.
"""

from sectionmark.compiler.driver import CompiledModule, compile
from sectionmark.compiler.embed import read_section_map
from sectionmark.compiler.targets import TARGET_FLAGS

__all__ = ["compile", "CompiledModule", "read_section_map", "TARGET_FLAGS"]
