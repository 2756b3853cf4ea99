"""The ONNX backend: lower an IR graph to an ONNX model, save it, run it on onnxruntime."""

from pseudoformer.backends.onnx.compile import to_onnx
from pseudoformer.backends.onnx.lower import DEFAULT_OPSET
from pseudoformer.backends.onnx.runner import OnnxRunner
from pseudoformer.backends.onnx.save import save_model
from pseudoformer.base.errors import BackendError

__all__ = ["DEFAULT_OPSET", "BackendError", "OnnxRunner", "save_model", "to_onnx"]
