"""Expressions → Vals: names, arithmetic, products, indexing, sums, lists, Iverson brackets and builtins.

Import `forms` (forms.py) to evaluate: it registers every form. This __init__ imports nothing, so that a module
below the forms (masks.py, pieces.py) can use core.py or affine.py without a cycle through the package.
"""
