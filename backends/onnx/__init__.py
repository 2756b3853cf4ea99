"""backends/onnx"""
