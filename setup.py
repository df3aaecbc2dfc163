"""Only the optional C extensions live here; everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and
sectionmark uses its Python zone stack (sectionmark.markers.zonestack), the
numpy profile reader (sectionmark.profiling.ireeprof) and the Tracy capture
reader's Python zone walks (sectionmark.tracy.reader), with the same results.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("sectionmark.markers._zonestack", ["src/sectionmark/markers/_zonestack.c"], optional=True),
    Extension("sectionmark.profiling._ireeprof", ["src/sectionmark/profiling/_ireeprof.c"], optional=True),
    Extension("sectionmark.tracy._tracyread", ["src/sectionmark/tracy/_tracyread.c"], optional=True),
])
