"""The PyTorch backend: an IR graph lowered to a torch.fx GraphModule (an nn.Module) whose parameters are
the model's, by name (names.py), and whose forward returns the outputs by name (compile.py, lower.py)."""
