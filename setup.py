"""Only the optional C extension lives here; everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and
sectionmark uses its Python zone stack (sectionmark.zonestack).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("sectionmark._zonestack", ["src/sectionmark/_zonestack.c"], optional=True)])
