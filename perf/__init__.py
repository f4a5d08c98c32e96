"""Performance suites (pytest-benchmark). See perf/README.md.

A package so that benchmark helpers resolve as `perf.<module>` targets
(``perf._trivial_targets:...``) independent of pytest's rootdir handling.
"""
