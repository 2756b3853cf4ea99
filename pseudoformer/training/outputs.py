"""What training writes: checkpoints (ours, and for the HF families a HF checkpoint directory), and the
loss curve as CSV and SVG. Every file is written atomically (atomic_write.py): an interrupted save leaves
the last complete one in place."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from pseudoformer.base.atomic_write import atomic_path, write_atomic
from pseudoformer.base.errors import UsageError
from pseudoformer.base.file_access import read_inside
from pseudoformer.weights import hf_engine
from pseudoformer.weights.hf_checkpoint import open_hf_tensors, read_hf_config, table_for
from pseudoformer.weights.hf_engine import Planned
from pseudoformer.weights.hf_table import Table, Tie
from pseudoformer.weights.safetensors_io import save_weights
from pseudoformer.weights.safetensors_stream import Entry, write_stream
from pseudoformer.weights.tensor_ref import TensorRef

CHECKPOINT = "model.safetensors"
HF_DIR = "hf"
HF_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "vocab.json", "merges.txt")
# What a run writes into its -o folder besides hf/: checked before the first step (pseudoformer/outputs.py).
RUN_FILES = (CHECKPOINT, "optimizer.safetensors", "loss.csv", "loss.svg", "training.json")


def save_checkpoint(directory: Path, weights: Mapping[str, np.ndarray], hf_source: Path | None = None,
                    group: str | None = None) -> None:
    """directory/model.safetensors (our names); with a HF source, directory/hf/ too: a HF checkpoint.
    ``group``: the parameter group (``theta`` for ``θ : GPT2``) the source checkpoint filled."""
    directory.mkdir(parents=True, exist_ok=True)
    save_weights(weights, directory / CHECKPOINT)
    if hf_source is not None:
        export_hf(hf_source, weights, directory / HF_DIR, group)


def export_hf(source: Path, ours: Mapping[str, np.ndarray], target: Path, group: str | None = None) -> None:
    """The source checkpoint with its tensors replaced by the trained ones, written one HF tensor at a time
    (holding that tensor, the index map of its elements and nothing else besides `ours`). The HF → ours
    mapping (the family's table, applied by hf_engine) only moves values (transposes, head slices), so it
    is inverted by mapping each HF tensor's element indices: where an index lands in our tensor is where
    that element's trained value is. A tied copy the file holds (GPT-2's lm_head beside wte) is saved equal
    to its source."""
    config = read_hf_config(source)
    table = table_for(config)
    refs = open_hf_tensors(source)
    # Each HF tensor's element indices, made when the mapping reads them, one tensor's worth at a time: int32
    # (a float32 tensor's size) where they fit.
    def index(shape: tuple[int, ...]) -> TensorRef:
        size = int(np.prod(shape, dtype=np.int64))
        kind = np.dtype(np.int32 if size < 2**31 else np.int64)
        return TensorRef(shape, kind, lambda: np.arange(size, dtype=kind).reshape(shape))

    ids = {n: index(tuple(r.shape)) for n, r in refs.items()}
    mapped = hf_engine.plan(table, ids, config, list(ours), group=group)
    if mapped.problems:
        raise UsageError(f"{source}: " + "; ".join(str(p) for p in mapped.problems))
    by_origin: dict[str, list[Planned]] = {}
    for planned in mapped.tensors.values():
        # A Fill (a tensor the file lacks, BART's final_logits_bias) has no HF element to write back.
        if planned.name in ours and planned.origin in refs:
            by_origin.setdefault(planned.origin, []).append(planned)
    copies = _retie(table, {n: tuple(r.shape) for n, r in refs.items()}, set(by_origin))

    def trained(name: str) -> np.ndarray:
        out = np.asarray(refs[name].load(), dtype=np.float32)
        if not out.flags.writeable or not out.flags.c_contiguous:  # a view of the file: written into, a copy
            out = np.array(out, order="C")
        for planned in by_origin.get(name, []):
            # the index map in our tensor's shape (a transposed or sliced view of the HF tensor's), used as it
            # is: flattening it, or widening it to int64, would copy it
            out.reshape(-1)[planned.load()] = np.asarray(ours[planned.name], np.float32)
        mapped.release()
        return out

    target.mkdir(parents=True, exist_ok=True)
    for f in HF_FILES:
        if (copy := read_inside(source, f, "checkpoint file", "tokenizer")) is not None:
            with atomic_path(target / f, mode=copy.mode) as tmp:  # never more open than its source
                tmp.write_bytes(copy.data)
    tensors = [Entry(n, tuple(r.shape), np.dtype(np.float32), lambda n=n: trained(copies.get(n, n)))
               for n, r in refs.items()]
    with atomic_path(target / CHECKPOINT) as tmp:
        write_stream(tensors, tmp, metadata={"producer": "pseudoformer"})


def _retie(table: Table, shapes: Mapping[str, tuple[int, ...]], read: set[str]) -> dict[str, str]:
    """{copy: source} for the copies of a tied tensor that no parameter was read from: they take the trained
    source's values, so the saved checkpoint stays tied (transformers re-ties on load, but a reader of the
    file sees them equal)."""
    short = {name.removeprefix(table.prefix): name for name in shapes}
    out: dict[str, str] = {}
    for tie in (t for t in table.tensors if isinstance(t, Tie)):
        present = [short[n] for n in tie.sources if n in short]
        if not present or present[0] not in read:
            continue
        for name in (*present[1:], *(short[n] for n in tie.copies if n in short)):
            if name not in read and shapes[name] == shapes[present[0]]:
                out[name] = present[0]
    return out


def write_loss_curve(directory: Path, losses: Sequence[tuple[int, float, float, float]]) -> None:
    """loss.csv (step, loss, tokens per second, and with --val-data the validation loss where it was
    measured) and loss.svg, a polyline of the loss by step (and the validation loss's)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    validated = any(math.isfinite(row[3]) for row in losses)
    w.writerow(["step", "loss", "tokens_per_s", *(["val_loss"] if validated else [])])
    # repr: the shortest text that reads back as the same float (the loss as computed, not rounded)
    for s, v, r, val in losses:
        w.writerow([s, repr(float(v)), f"{r:.1f}", *([repr(float(val)) if math.isfinite(val) else ""]
                                                     if validated else [])])
    write_atomic(directory / "loss.csv", lambda fh: fh.write(buf.getvalue().encode()))
    curve = svg_curve([(s, v) for s, v, _, _ in losses], [(s, val) for s, _, _, val in losses if math.isfinite(val)])
    write_atomic(directory / "loss.svg", lambda fh: fh.write(curve.encode()))


def read_loss_curve(directory: Path) -> list[tuple[int, float, float, float]]:
    """loss.csv read back (a resumed run's curve goes on from it); nothing where it is missing or unreadable."""
    try:
        rows = list(csv.reader(io.StringIO((directory / "loss.csv").read_text())))[1:]
        return [(int(r[0]), float(r[1]), float(r[2]), float(r[3]) if len(r) > 3 and r[3] else math.nan)
                for r in rows]
    except (OSError, ValueError, IndexError):
        return []


def svg_curve(points: Sequence[tuple[int, float]], val: Sequence[tuple[int, float]] = (), width: int = 640,
              height: int = 320) -> str:
    """A line chart of (step, loss) as a standalone SVG: axes, the min and max loss, the first and last step;
    the validation loss (`val`), where there is one, as a second, orange line on the same axes."""
    pad = 48
    finite = [(s, v) for s, v in points if np.isfinite(v)]
    checked = [(s, v) for s, v in val if np.isfinite(v)]
    if not finite:
        finite = [(0, 0.0)]
    s0, s1 = finite[0][0], max(finite[-1][0], finite[0][0] + 1)
    lo, hi = min(v for _, v in finite + checked), max(v for _, v in finite + checked)
    hi = hi if hi > lo else lo + 1.0

    def xy(s: float, v: float) -> str:
        x = pad + (s - s0) / (s1 - s0) * (width - 2 * pad)
        y = height - pad - (v - lo) / (hi - lo) * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    line = " ".join(xy(s, v) for s, v in finite)
    second = (f'<polyline fill="none" stroke="#ff7f0e" stroke-width="1.5" points="{" ".join(xy(s, v) for s, v in checked)}"/>\n'
              f'<text x="{width - pad}" y="{pad - 8}" text-anchor="end" fill="#ff7f0e">validation</text>\n'
              if checked else "")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
            f'font-size="12">\n<rect width="100%" height="100%" fill="white"/>\n'
            f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>\n'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>\n'
            f'<text x="{pad - 4}" y="{pad + 4}" text-anchor="end">{hi:.4g}</text>\n'
            f'<text x="{pad - 4}" y="{height - pad}" text-anchor="end">{lo:.4g}</text>\n'
            f'<text x="{pad}" y="{height - pad + 16}" text-anchor="middle">{s0}</text>\n'
            f'<text x="{width - pad}" y="{height - pad + 16}" text-anchor="middle">{s1}</text>\n'
            f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">step</text>\n'
            f'<text x="12" y="{height / 2}" transform="rotate(-90 12 {height / 2})" text-anchor="middle">loss</text>\n'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{line}"/>\n{second}</svg>\n')


def write_meta(directory: Path, meta: Mapping[str, object]) -> None:
    write_atomic(directory / "training.json", lambda fh: fh.write(json.dumps(meta, indent=2).encode()))
