"""Timing greedy generation on onnxruntime-genai: genai_timing.py (in genai's own environment) and
common/gpu_decode.py (in the GPU benchmark's one process, where onnxruntime-genai-cuda sits beside
onnxruntime-gpu) call it on a loaded og.Model. numpy only, so that genai's environment can import it.
"""

from __future__ import annotations

import statistics
import time

import numpy as np


def time_model(og, model, prompt: np.ndarray, new: int, rounds: int, max_length: int | None = None) -> dict:  # type: ignore[no-untyped-def]
    """Greedy generation of `new` tokens after `prompt` ([batch, n] ids) on a loaded og.Model, `rounds` times after
    one warm-up: every round's prefill seconds (the prompt and the first token) and median seconds per further
    token, and the last round's tokens per row. """
    batch, length = prompt.shape
    prefill, steps, tokens = [], [], []
    for r in range(rounds + 1):  # round 0 warms up
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=max_length or length + new, min_length=length + new,
                                  batch_size=batch)
        gen = og.Generator(model, params)
        start = time.perf_counter()
        gen.append_tokens(prompt.astype(np.int32))
        rows = [[int(t)] for t in gen.get_next_tokens()]
        t_prefill = time.perf_counter() - start
        times = []
        for _ in range(new - 1):
            start = time.perf_counter()
            gen.generate_next_token()
            for row, t in zip(rows, gen.get_next_tokens(), strict=True):
                row.append(int(t))
            times.append(time.perf_counter() - start)
        tokens = rows
        if r:
            prefill.append(t_prefill)
            steps.append(statistics.median(times) if times else 0.0)
    return {"prefill_s": prefill, "step_s": steps, "tokens": tokens}
