"""sectionmark: name parts of a model once, see the names wherever IREE runs it."""

from sectionmark.markers import current_path, section
from sectionmark.paths import SectionPath

__all__ = ["section", "current_path", "SectionPath"]
__version__ = "0.1.0"
