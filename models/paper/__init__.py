"""Algorithms 1-10 of Formal Algorithms for Transformers, line by line."""
