#!/usr/bin/env bash
# The pieces a GPU session needs (docs/gpu.md), made where PyPI can be reached, in the project's root:
#     bash benchmarks/gpu_pack.sh            # writes .gpu/ (git-ignored)
# ../shared/gpu/pack.sh's (onnxruntime-gpu in pieces, onnxruntime-genai-cuda, lark, gguf), and beside them in
# .gpu/small what onnxruntime-genai's model builder imports that the GPU machine's image lacks: onnx-ir (the
# image has torch, transformers, safetensors, tqdm and onnx). benchmarks/gpu.py's decode rows build genai's own
# folders there, its anchor; without onnx-ir their genai cells would be empty ("genai's builder failed").
# .gpu/device.sh installs every wheel in .gpu/small with the last piece.
set -euo pipefail
dest=${1:-.gpu}
bash "${PF_SHARED_GPU:-../shared/gpu}/pack.sh" "$dest"
pip download -q --no-deps --only-binary=:all: -d "$dest/small" onnx-ir==1.1.0
echo "added to $dest/small: $(cd "$dest/small" && ls onnx_ir-*.whl)"
