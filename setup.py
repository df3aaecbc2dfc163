"""Only the optional C extensions live here; everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and
sectionmark uses its Python zone stack (sectionmark.markers.zonestack), the
numpy profile reader (sectionmark.readers.ireeprof) and the Tracy capture
reader's Python zone walks (sectionmark.readers.tracy_capture), with the same results, and the Tracy replay's
Python send loop (sectionmark.renderers.tracy_out: the same steps, sent later where zones are dense).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("sectionmark.markers._zonestack", ["src/sectionmark/markers/_zonestack.c"], optional=True),
    Extension("sectionmark.readers._ireeprof", ["src/sectionmark/readers/_ireeprof.c"], optional=True),
    Extension("sectionmark.readers._tracyread", ["src/sectionmark/readers/_tracyread.c"], optional=True),
    Extension("sectionmark.renderers._tracyreplay", ["src/sectionmark/renderers/_tracyreplay.c"], optional=True),
])
