"""pseudoformer: compile transformer architectures written as in Formal Algorithms for Transformers."""

__version__ = "0.1.0"
