"""Only the optional C extensions live here; everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and
sectionmark uses its Python zone stack (sectionmark.markers.zonestack), the
numpy profile reader (sectionmark.readers.ireeprof), profiling's numpy passes
(sectionmark.profiling.native) and the Tracy capture reader's Python zone walks
(sectionmark.readers.tracy_capture), with the same results. ``depends``: the
header the profile passes share (a change rebuilds both, and sdists carry it).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("sectionmark.markers._zonestack", ["src/sectionmark/markers/_zonestack.c"], optional=True),
    Extension("sectionmark.readers._ireeprof", ["src/sectionmark/readers/_ireeprof.c"],
              depends=["src/sectionmark/_buffers.h"], optional=True),
    Extension("sectionmark.profiling._sectionpass", ["src/sectionmark/profiling/_sectionpass.c"],
              depends=["src/sectionmark/_buffers.h"], optional=True),
    Extension("sectionmark.readers._tracyread", ["src/sectionmark/readers/_tracyread.c"], optional=True),
])
