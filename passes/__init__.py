"""Graph-to-graph rewrites over the IR: the -O levels' cleanups and fusions, and the pipelines each backend,
the generator and the quantizer run (manager.py names them all)."""
