"""The dataflow IR: ops, tensor types with symbolic dims, graphs, and the numpy reference interpreter."""

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.types import Dim, DType, Span, TensorType

__all__ = ["DType", "Dim", "Graph", "Node", "Op", "Span", "TensorType"]
