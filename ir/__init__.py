"""The dataflow IR: ops, tensor types with symbolic dims, graphs, and the numpy reference interpreter."""

from pseudoformer.ir.ops import Op
from pseudoformer.ir.types import DType, Dim, Span, TensorType
from pseudoformer.ir.node import Node
from pseudoformer.ir.graph import Graph

__all__ = ["DType", "Dim", "Graph", "Node", "Op", "Span", "TensorType"]
