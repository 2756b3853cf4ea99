#!/usr/bin/env python3
"""Write a random bf16 HF checkpoint of one of the ladder's shapes, tensor by tensor (common/checkpoints.py).

    python benchmarks/scale_checkpoints.py RUNG DIRECTORY [LAYERS]
"""

from __future__ import annotations

import argparse

from common.checkpoints import FAMILY_SHAPES, SHAPES, main

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rung", choices=sorted(SHAPES | FAMILY_SHAPES))
    ap.add_argument("directory")
    ap.add_argument("layers", nargs="?", help="keep only the first LAYERS layers")
    args = ap.parse_args()
    main([args.rung, args.directory] + ([args.layers] if args.layers else []))
