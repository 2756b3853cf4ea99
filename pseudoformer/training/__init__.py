"""Training: the loop (loop.py), its data (data.py), outputs (outputs.py) and step runtimes (runtimes.py), and
`pseudoformer train` (cli.py). The step itself is made by passes: the autodiff (passes/autodiff.py), the step
graph (passes/training_step.py), its split for onnxruntime (passes/split_step.py, update_chunks.py); compile.py
runs their pipelines, and backends/onnx builds the sessions."""
