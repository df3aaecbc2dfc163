"""Stage 1 of the data flow: the markers users put in model code.

`section` (marker.py) is the one object that is both decorator and context
manager; zone emitters (Tracy, see sectionmark.tracy) hang off it through the
per-thread zone stacks in zonestack.py (a C extension, _zonestack.c, with a
pure-Python fallback). The same extension holds section's fast enter/exit.
While a framework traces, a section enters the scope that framework's
importer registered in frameworks.py, the markers' one seam to the importers.
"""

from sectionmark.markers.marker import section

__all__ = ["section"]
