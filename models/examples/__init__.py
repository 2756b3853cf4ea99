"""A gallery of small architectures in the notation, each with a tiny config and a test against numpy."""
