"""Generation (the paper's Algorithms 14 and 15) over a decoder with a compiler-derived key/value cache."""

from .generator import BACKENDS, Generation, Generator
from .sampling import Sampling, SamplingError

__all__ = ["BACKENDS", "Generation", "Generator", "Sampling", "SamplingError"]
