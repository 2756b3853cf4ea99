"""The dataflow IR: ops, tensor types with symbolic dims, graphs, and the numpy reference interpreter."""

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.text_parser import IRParseError, parse
from pseudoformer.ir.types import Dim, DType, Span, TensorType, TupleType

__all__ = ["DType", "Dim", "Graph", "IRParseError", "Node", "Op", "Span", "TensorType", "TupleType", "parse"]
