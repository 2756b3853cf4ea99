"""onnxruntime-genai's side of bench_llama.py, run by the interpreter of its own virtual environment.

onnxruntime-genai brings its own onnxruntime, so it runs in a process of its own, started once; it reads
one JSON request a line on stdin and answers one JSON line on stdout:

    {"prompt": [ids], "new": 32}   →   {"tokens": [...], "prefill": s, "steps": [s, ...]}

With a third argument, ORT profiles the session to files of that prefix (written when the process ends).

`prefill` is append_tokens (the prompt through the model, its last logits); each step is one
generate_next_token (pick the token from the logits, run the model on it). Greedy, batch 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("threads", type=int)
    ap.add_argument("profile", nargs="?", help="ORT profile files' prefix")
    args = ap.parse_args()
    import onnxruntime_genai as og

    model_dir, threads = args.model_dir, args.threads
    config_path = f"{model_dir}/genai_config.json"
    with open(config_path) as f:
        config = json.load(f)
    options = config["model"]["decoder"].setdefault("session_options", {})
    options.update({"intra_op_num_threads": threads, "inter_op_num_threads": 1})
    if args.profile:
        options["enable_profiling"] = args.profile
    else:
        options.pop("enable_profiling", None)
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    model = og.Model(model_dir)
    print(json.dumps({"ready": og.__version__}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(req["prompt"]) + req["new"], do_sample=False)
        gen = og.Generator(model, params)
        start = time.perf_counter()
        gen.append_tokens(req["prompt"])
        prefill = time.perf_counter() - start
        tokens, steps = [], []
        for _ in range(req["new"]):
            start = time.perf_counter()
            gen.generate_next_token()
            steps.append(time.perf_counter() - start)
            tokens.append(int(gen.get_next_tokens()[0]))
            if gen.is_done():
                break
        print(json.dumps({"tokens": tokens, "prefill": prefill, "steps": steps}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
