"""What the benchmark scripts of benchmarks/ import: the harness (harness.py: shared flags, the machine's
facts, interleaved timing) and the modules one or more scripts are built from. A script (benchmarks/*.py)
imports from here, never from another script; a module here never imports a script.

Run a script from anywhere: its own folder, benchmarks/, is first on `sys.path`, so `common` is found.
"""
