"""Greedy generation with onnxruntime-genai, run by the interpreter of genai's own environment.

onnxruntime-genai brings its own onnxruntime, which must not share a process or an environment with
ours, so the tests run this file as a subprocess (tests/genai/genai_env.py) and it imports nothing of
pseudoformer. It reads one JSON request on stdin and prints one JSON answer:

    {"folder": DIR, "prompts": [[ids], ...], "new": N}  →  {"tokens": [[ids], ...], "version": "0.18.0"}
    {"folder": DIR, "text": T, "chat": [messages]}      →  {"ids": [...], "chat": "the template applied"}

A batch of prompts of different lengths is padded on the right with the folder's pad_token_id, as
genai's own tokenizer pads a batch (it takes that token for padding wherever it appears).
"""

from __future__ import annotations

import json
import sys

import numpy as np


def main() -> int:
    import onnxruntime_genai as og

    req = json.load(sys.stdin)
    with open(f"{req['folder']}/genai_config.json") as f:
        pad = json.load(f)["model"]["pad_token_id"]
    model = og.Model(req["folder"])
    if "text" in req:  # the folder's tokenizer files, as genai reads them
        tokenizer = og.Tokenizer(model)
        chat = tokenizer.apply_chat_template(json.dumps(req["chat"]), add_generation_prompt=True)
        print(json.dumps({"ids": [int(i) for i in tokenizer.encode(req["text"])], "chat": chat}))
        return 0
    prompts = req["prompts"]
    width = max(len(p) for p in prompts)
    ids = np.array([p + [pad] * (width - len(p)) for p in prompts], dtype=np.int32)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=width + req["new"], batch_size=len(prompts))
    gen = og.Generator(model, params)
    gen.append_tokens(ids)
    tokens: list[list[int]] = [[] for _ in prompts]
    for _ in range(req["new"]):
        if gen.is_done():
            break
        gen.generate_next_token()
        for row, t in enumerate(gen.get_next_tokens()):
            tokens[row].append(int(t))
    print(json.dumps({"tokens": tokens, "version": og.__version__}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
