"""Only the optional C extensions live here; everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and
sectionmark uses its Python zone stack (sectionmark.markers.zonestack), the
numpy profile reader (sectionmark.readers.ireeprof) and the Tracy capture
reader's Python zone walks (sectionmark.readers.tracy_capture), with the same results.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("sectionmark.markers._zonestack", ["src/sectionmark/markers/_zonestack.c"], optional=True),
    Extension("sectionmark.readers._ireeprof", ["src/sectionmark/readers/_ireeprof.c"], optional=True),
    Extension("sectionmark.readers._tracyread", ["src/sectionmark/readers/_tracyread.c"], optional=True),
])
