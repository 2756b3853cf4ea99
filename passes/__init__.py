"""Graph-to-graph rewrites over the IR: the -O levels' cleanups and fusions, and the pipelines each backend,
the generator, the quantizer and a training step (its autodiff, its split into a gradient and an in-place
update half, the update's pieces) run (manager.py names them all)."""
