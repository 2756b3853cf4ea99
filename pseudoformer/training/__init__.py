"""Training: a loss algorithm's gradient by reverse-mode autodiff (passes/autodiff.py), one compiled step
per backend (passes/training_step.py, runtimes.py), the loop (loop.py), its data (data.py) and outputs
(outputs.py), and `pseudoformer train` (cli.py)."""
