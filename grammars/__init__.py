"""The Lark grammar of the .alg notation, shipped as package data."""
