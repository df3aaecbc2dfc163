"""Only the optional C extensions live here; everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and
sectionmark uses its Python zone stack (sectionmark.markers.zonestack), the
numpy profile reader (sectionmark.readers.ireeprof), profiling's numpy passes
(sectionmark.profiling.native) and the Tracy capture reader's Python zone walks
(sectionmark.readers.tracy_capture), with the same results, and the Tracy replay's Python send loop
(sectionmark.renderers.tracy_out: the same steps, sent later where zones are dense). ``depends``: the
header the profile passes share (a change rebuilds both, and sdists carry it).
setuptools only warns about each extension it could not build; the build then
says in one line which fallbacks the install uses (shown by ``pip install -v``;
scripts/check_wheel.sh checks it with ``CC=false``).
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

FALLBACK_LINE = ("sectionmark: C extensions not built ({names}): no working C compiler; installing the "
                 "pure-Python fallback (same results, slower profile reading)")


class BuildOptionalExtensions(build_ext):
    """build_ext, then one line naming the optional extensions it could not build."""

    def run(self):
        super().run()
        missing = [extension.name.rpartition(".")[2] for extension in self.extensions
                   if not os.path.exists(self.get_ext_fullpath(extension.name))]
        if missing:
            print(FALLBACK_LINE.format(names=", ".join(missing)), file=sys.stderr, flush=True)


setup(cmdclass={"build_ext": BuildOptionalExtensions}, ext_modules=[
    Extension("sectionmark.markers._zonestack", ["src/sectionmark/markers/_zonestack.c"], optional=True),
    Extension("sectionmark.readers._ireeprof", ["src/sectionmark/readers/_ireeprof.c"],
              depends=["src/sectionmark/_buffers.h", "src/sectionmark/readers/_stream.h"], optional=True),
    Extension("sectionmark.profiling._sectionpass", ["src/sectionmark/profiling/_sectionpass.c"],
              depends=["src/sectionmark/_buffers.h", "src/sectionmark/profiling/_sweeps.h"], optional=True),
    Extension("sectionmark.readers._tracyread", ["src/sectionmark/readers/_tracyread.c"], optional=True),
    Extension("sectionmark.renderers._tracyreplay", ["src/sectionmark/renderers/_tracyreplay.c"], optional=True),
])
