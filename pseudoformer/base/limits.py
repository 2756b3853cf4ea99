"""The limits pseudoformer holds untrusted input to, in one place (docs/security.md lists them).

A file, a config value or a command-line number may come from anyone. Each limit below bounds
the time or memory one of them can cost before pseudoformer refuses it with a message, instead of
reading a device until memory runs out or unrolling a model for hours.
"""

from __future__ import annotations

import os
import resource

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

# The most bytes read from each kind of file. The real models are a few KiB of source and a few
# hundred bytes of config; the caps leave room for far larger ones and stop /dev/zero-like input.
FILE_CAPS: dict[str, int] = {
    "source": 1 * MiB,  # a .alg file (the entry and each file it `use`s)
    "config": 1 * MiB,  # a --config .toml, and a checkpoint's config.json
    "shard index": 64 * MiB,  # model.safetensors.index.json of a sharded checkpoint
    "input": 1 * GiB,  # a --input .npy array
    "tokenizer": 256 * MiB,  # a --tokenizer tokenizer.json
    "onnx": 2 * GiB,  # a .onnx file given to `run` (protobuf's own limit; bigger weights live in .data)
}

# IR nodes the elaborator may create for one entry before it refuses (--max-nodes raises it).
# GPT-2 small at -O0 is about 4,500 nodes, GPT-2 XL about 18,000.
MAX_NODES = 1_000_000
# The largest size a hyperparameter may have: a tensor's dimension is an int64 in every runtime (numpy, ONNX,
# TVM), and a product of two such sizes (d_e · N_V) must still be one.
MAX_SIZE = 2**31 - 1
# The longest sequence (any run-time size: a length(x), a batch) a model without a limit of its own
# may be given. A model with a position table (W_p ∈ ℝ^{d_e × ℓ_max}) is bounded by ℓ_max instead; one
# without (RoPE, ALiBi) would otherwise take 200,000 ids and allocate a 200,000² attention matrix.
# `--max-seq-len N` (or setting pseudoformer.base.limits.MAX_SEQ_LEN) changes it.
MAX_SEQ_LEN = 8192
# What a model file given to `run` may allocate as it computes, besides twice its weights (run_onnx):
# a 200-byte .onnx can ask for gigabytes. `run --max-memory BYTES` changes it.
RUN_MEMORY = 4 * GiB
# Parentheses, function applications and operator chains nested deeper than this in one line are
# a diagnostic: each level costs a few Python frames when the line is turned into a graph.
MAX_NESTING = 100
# Algorithm calls are inlined, and `use`s read, by recursion: a chain deeper than these (f0 calls f1 … calls
# f999, or m0.alg uses m1.alg … m999.alg) is a diagnostic at the call or `use` that goes too deep, long before
# Python's own recursion limit. The deepest real model nests 5 calls (GPT2 → layers → MHAttention → Attention →
# softmax) and 3 `use`s.
MAX_CALL_DEPTH = 64
MAX_USE_DEPTH = 64
# A tokenizer's token and pre-tokenizer regex (pseudoformer/tokenizer.py, weights/gguf_tokenizer.py): the longest
# piece of the real vocabularies is a few hundred characters; recovering a GGUF vocabulary's merges takes time
# quadratic in a token's length, and a regex is compiled and run by native code.
MAX_TOKEN_CHARS = 4096
MAX_TOKENIZER_REGEX = 4096
# Digits in an integer literal (Python refuses to convert more than 4,300 anyway).
MAX_INT_DIGITS = 100
# --threads may be 1 to this many times the cores this process may run on.
THREADS_PER_CORE = 4
# A sampling temperature τ must be 0 (greedy) or at least this: below it q ∝ p^{1/τ} is argmax up
# to rounding, and at the extremes (τ = 1e-320) p^{1/τ} overflows into NaN.
MIN_TEMPERATURE = 1e-3


def cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def max_threads() -> int:
    return THREADS_PER_CORE * cores()


def available_memory() -> int | None:
    """Bytes of memory a new allocation can still get: MemAvailable, or less under `ulimit -v`."""
    avail: int | None = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * KiB
                    break
    except (OSError, ValueError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        left = max(soft - _address_space_used(), 0)
        avail = left if avail is None else min(avail, left)
    return avail


def _address_space_used() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * KiB
    except (OSError, ValueError):
        pass
    return 0


def show_bytes(n: float) -> str:
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"
