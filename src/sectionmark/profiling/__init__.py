"""Profiling: a run's events joined with the section map into per-section statistics (`ProfileSession`).

Attribution places each dispatch event in the map's slots (`attribute`),
`read` folds a profile's events into the session a window at a time
(with `section_time`'s sums) and returns the run that keeps the file,
`session` and `stats` are the data model,
and the views computed from it (components, kernels, runs, compare,
roofline, timelines) each live in their own module. Running a module under
the profiler is a workflow (`sectionmark.workflows.measure`).
"""
