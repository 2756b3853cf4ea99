#!/usr/bin/env python3
"""Write a HF Llama or Qwen2 checkpoint as a GGUF file for llama.cpp (common/llamacpp_gguf.py says how).

    python benchmarks/llamacpp_gguf.py CHECKPOINT_DIR OUT.gguf
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.llamacpp_gguf import convert

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    convert(args.checkpoint, args.out)
