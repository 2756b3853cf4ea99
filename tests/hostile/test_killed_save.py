"""Kind: a run killed (SIGKILL: nothing of ours runs) at any point of a save leaves one checkpoint in its -o folder,
the previous complete one or the new complete one, never model.safetensors of one step beside hf/ of another.

A child trains one step from a HF checkpoint, then a resumed child saves step 2 and is killed at the k-th
file-system call of its save (every rename, link, unlink and fsync: the points where a save changes what is on
disk), for k spread over the whole save. After each kill the folder is read as a user would, by its names: every
file tells the same step, the model in model.safetensors is the one in hf/, and the run resumes from it cleanly."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from pseudoformer.weights.safetensors_io import read_safetensors
from tests.training import torch_cases
from tests.training.tiny_train import LOSS, token_stream

# The child: the CLI, with every call that changes the file system counted once its save has begun, and
# SIGKILL at the k-th (k = 0: never; the count is printed, to spread the kills over a save).
CHILD = r"""
import atexit, os, signal, sys
import pseudoformer.training.steps as steps
from pseudoformer.cli import main
k, counted, armed = int(sys.argv[1]), [0], [False]
def counting(f):
    def g(*a, **kw):
        if armed[0]:
            counted[0] += 1
            if counted[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)
        return f(*a, **kw)
    return g
for name in ("replace", "rename", "symlink", "unlink", "fsync", "rmdir"):
    setattr(os, name, counting(getattr(os, name)))
save = steps._save
def arming(*a, **kw):
    armed[0] = True
    return save(*a, **kw)
steps._save = arming
atexit.register(lambda: print(f"calls {counted[0]}", file=sys.stderr))
sys.exit(main(sys.argv[2:]))
"""


# torch_cases.gpt2's sizes: a resumed run reads its parameters from model.safetensors, its sizes from -D.
SIZES = [a for k, v in {"L": 2, "H": 4, "d_e": 32, "d_mlp": 128, "d_attn": 8, "d_mid": 8, "N_V": 101, "ell_max": 64,
                        "eps": 1e-5}.items() for a in ("-D", f"{k}={v}")]


def _train(k: int, *argv: str | Path) -> subprocess.CompletedProcess[str]:
    if "--resume" in argv:
        argv = (*argv, *SIZES)
    return subprocess.run([sys.executable, "-c", CHILD, str(k), "train", LOSS, *map(str, argv), "--seq-len", "8",
                           "--batch-size", "2", "--lr", "1e-2", "--backend", "numpy"],
                          capture_output=True, text=True, timeout=600)


def _consistent(out: Path) -> int:
    """The step the folder's checkpoint is at, every file agreeing (read by the names a user reads)."""
    steps = json.loads((out / "training.json").read_text())["steps"]
    rows = (out / "loss.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == list(range(1, steps + 1))
    state = read_safetensors(out / "optimizer.safetensors")
    assert int(np.asarray(state["t"]).reshape(-1)[0]) == steps
    ours, hf = read_safetensors(out / "model.safetensors"), read_safetensors(out / "hf" / "model.safetensors")
    w_e, wte = ours["theta.W_e"], hf["transformer.wte.weight"]
    assert np.array_equal(w_e, wte) or np.array_equal(w_e.T, wte), "model.safetensors and hf/ are of two steps"
    return steps


def test_a_save_killed_at_any_point_leaves_one_whole_checkpoint(tmp_path: Path) -> None:
    torch_cases.gpt2(tmp_path / "hf")
    ids = token_stream(tmp_path)
    first = tmp_path / "first"
    r = _train(0, "--weights", tmp_path / "hf", "--data", ids, "--steps", "1", "-o", first)
    assert r.returncode == 0, r.stderr
    saved = {n: (first / n).read_bytes() for n in ("model.safetensors", "training.json")}
    whole = tmp_path / "whole"  # the save as the killed ones run it: into a folder that holds a checkpoint
    subprocess.run(["cp", "-a", first, whole], check=True)
    r = _train(0, "--resume", whole, "--data", ids, "--steps", "2", "-o", whole)
    assert r.returncode == 0, r.stderr
    assert _consistent(whole) == 2
    calls = int(re.findall(r"calls (\d+)", r.stderr)[-1])
    assert calls >= 10  # a save is many steps: the kills below fall inside it
    seen = set()
    for k in sorted({1, 2, calls // 4, calls // 2, 3 * calls // 4, calls - 2, calls - 1, calls}):
        out = tmp_path / f"killed{k}"
        subprocess.run(["cp", "-a", first, out], check=True)
        r = _train(k, "--resume", out, "--data", ids, "--steps", "2", "-o", out)
        assert r.returncode == -signal.SIGKILL, (k, r.stderr[-2000:])
        step = _consistent(out)
        seen.add(step)
        if step == 1:  # the previous checkpoint, as it was
            assert all((out / n).read_bytes() == data for n, data in saved.items()), k
        # and the run goes on from it, leaving nothing of the killed save behind (a lock file killed in the moment
        # before it was locked is swept once it is a minute old: aged here, as a later run would find it)
        for name in os.listdir(out):
            if name.endswith(".locking"):
                os.utime(out / name, (time.time() - 120, time.time() - 120))
        r = _train(0, "--resume", out, "--data", ids, "--steps", "3", "-o", out)
        assert r.returncode == 0, (k, r.stderr[-2000:])
        assert _consistent(out) == 3
        left = sorted(n for n in os.listdir(out) if n.startswith("."))
        assert len(left) == 2 and left[0] == ".checkpoint", (k, left)  # the link and the one generation
    assert seen == {1, 2}  # kills fell before the switch and after it
