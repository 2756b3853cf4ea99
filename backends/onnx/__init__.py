"""The ONNX backend: lower an IR graph to an ONNX model, save it, run it on onnxruntime.

The names below are imported on first use, so that importing one module of this package (backends/options.py
asks providers.py whether onnxruntime has CUDA) does not import the compile chain, which imports the options.
"""

from pseudoformer.base.lazy_names import lazy_names

_NAMES = {
    "to_onnx": "pseudoformer.backends.onnx.compile",
    "DEFAULT_OPSET": "pseudoformer.backends.onnx.lower",
    "OnnxRunner": "pseudoformer.backends.onnx.runner",
    "save_model": "pseudoformer.backends.onnx.save",
    "BackendError": "pseudoformer.base.errors",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
