"""The paper's algorithms and real architectures as .alg files, with their configs (package data)."""
