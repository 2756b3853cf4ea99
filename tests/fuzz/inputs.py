"""Mutants of the inputs that are not .alg text: checkpoint configs, safetensors and GGUF headers,
tokenizer files and ONNX models.

Each input kind has a base — small, valid files made once per fuzzing run (build_bases) — and a
mutation that writes one seeded, broken copy of a base into a worker's directory and returns the
command line that reads it. What the mutants aim at:

* config.json of a GPT-2 and a Llama checkpoint (with their safetensors weights, so a config that passes
  reaches the weights): values made NaN, ±Infinity, 1e999, huge, negative, zero, of the wrong type, deep,
  or holding control characters; keys dropped, renamed, added.
* safetensors: the JSON header (dtypes, shapes, offsets, names with escapes), its length field, the data.
* GGUF (the `gguf` package writes the bases): a GPT-2 file, which --weights refuses by architecture, and a
  Llama one as llama.cpp writes it (Q8_0 and Q4_0 matrices, a vocabulary), which loads: header bytes flipped,
  the file cut short, an array's count or a string's length made huge, a value's type changed.
* tokenizer.json: its JSON values, its vocabulary, and its pre-tokenizer regex (backtracking ones
  included, which make the Rust code panic).
* ONNX: metadata_props (the token bounds `run` trusts), input dims, opset and IR versions, producer
  strings with escapes, attribute values, and bytes of the protobuf.
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODELS = Path(__file__).resolve().parents[2] / "models"
GPT2, LLAMA = MODELS / "gpt2.alg", MODELS / "llama.alg"
SIZES = ["--config", "/dev/null", "-D", "L=1", "-D", "H=2", "-D", "d_e=8", "-D", "d_mlp=16", "-D", "d_attn=4",
         "-D", "d_mid=4", "-D", "ell_max=6", "-D", "N_V=11", "-D", "eps=1e-5", "-D", "ell_gen=1", "-D", "tau=1.0"]
_RAW = "@@RAW@@"  # a placeholder in serialised JSON for a token json.dumps cannot write (NaN, 1e999)
HOSTILE_VALUES: list[Any] = [
    0, -1, 1, 2, 10**9, 2**31, 2**63, 10**30, -(2**63), 0.5, -0.0, 1e-320, 1e308, "", "text", "\x1b]0;t\x07\nerror: x",
    "\u202e", "a" * 10000, None, True, False, [], [1, 2], {}, {"a": 1}, [[[[[]]]]], "NaN", "Infinity",
    (_RAW, "NaN"), (_RAW, "Infinity"), (_RAW, "-Infinity"), (_RAW, "1e999"), (_RAW, "9" * 5000),
    (_RAW, "[" * 5000 + "]" * 5000),
]


# ---- JSON

def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(value, dict):
        for k, v in list(value.items())[:200]:
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:50]):
            out += _paths(v, (*path, i))
    return out


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = value
    return doc


def mutate_json(doc: Any, rng: random.Random, extra: list[Any] = ()) -> tuple[str, str]:
    """Serialised JSON text of `doc` with one to three seeded edits, and what they were."""
    raws: list[str] = []
    edits = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = rng.choice(paths)
        action = rng.random()
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        if action < 0.1 and isinstance(parent, dict):
            del parent[path[-1]]
            edits.append(f"drop {'.'.join(map(str, path))}")
            continue
        if action < 0.15 and isinstance(parent, dict):
            parent[f"{path[-1]}\x1b[2J"] = parent.pop(path[-1])
            edits.append(f"rename {'.'.join(map(str, path))}")
            continue
        value = copy.deepcopy(rng.choice([*HOSTILE_VALUES, *extra]))  # a shared list set twice would make a cycle
        shown = str(value[1] if isinstance(value, tuple) else value)[:40]
        if isinstance(value, tuple):
            raws.append(value[1])
            value = f"{_RAW}{len(raws) - 1}"
        doc = _set(doc, path, value)
        edits.append(f"{'.'.join(map(str, path))[:60]} = {shown!r}")
    text = json.dumps(doc)
    for i, raw in enumerate(raws):
        text = text.replace(f'"{_RAW}{i}"', raw)
    return text, "; ".join(edits)


# ---- bases

_BUILD = r"""
import json, sys
from pathlib import Path
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
root = Path(sys.argv[1])
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=11, n_positions=6)).save_pretrained(root / "gpt2")
LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, hidden_size=8, num_attention_heads=2, num_key_value_heads=1,
                             intermediate_size=16, vocab_size=11, max_position_embeddings=64,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
                             )).save_pretrained(root / "llama")
sys.path.insert(0, sys.argv[2])  # the repository: llama.cpp's layout as the GGUF tests write it
from gguf import GGMLQuantizationType as Q
from tests.weights.gguf_testlib import write_gguf
torch.manual_seed(0)
plain = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                                     intermediate_size=64, vocab_size=11, max_position_embeddings=64))
write_gguf(root / "llama.gguf", plain, "llama", lambda name, shape: Q.Q4_0 if "ffn" in name else Q.Q8_0)
"""


def build_bases(root: Path) -> Path:
    """The valid files every mutant starts from, in root/bases (built once per fuzzing run)."""
    bases = root / "bases"
    bases.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", _BUILD, str(bases), str(MODELS.parent)], check=True, timeout=600,
                   capture_output=True)
    for d in ("gpt2", "llama"):  # only what pseudoformer reads
        for extra in (bases / d).iterdir():
            if extra.name not in ("config.json", "model.safetensors"):
                extra.unlink()
    import pseudoformer

    pseudoformer.compile(str(GPT2), config="/dev/null", defines=SIZES[3::2], opt_level=0).save(bases / "m.onnx")
    _tokenizer(bases / "tokenizer.json")
    _gguf(bases / "m.gguf")
    return bases


def _tokenizer(path: Path) -> None:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["[UNK]", "a", "b", "c", "ab", "bc", "the", "cat", " ", "x", "y"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\w+|\s"), "isolated")
    tok.save(str(path))


def _gguf(path: Path) -> None:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.ones((11, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- mutations: each writes its mutant under `work` and returns (argv, what was done)

Mutation = Callable[[Path, Path, random.Random], tuple[list[str], str]]


def config_json(bases: Path, work: Path, rng: random.Random) -> tuple[list[str], str]:
    which = rng.choice(["gpt2", "llama"])
    ckpt = work / "ckpt"
    shutil.rmtree(ckpt, ignore_errors=True)
    shutil.copytree(bases / which, ckpt)
    doc = json.loads((ckpt / "config.json").read_text(encoding="utf-8"))
    text, edit = mutate_json(doc, rng)
    (ckpt / "config.json").write_text(text, encoding="utf-8")
    alg = GPT2 if which == "gpt2" else LLAMA
    return ["run", str(alg), "--weights", str(ckpt), "--input", "x=[[1, 2]]", "-o", str(work / "y.npz")], \
        f"{which} config.json: {edit}"


def safetensors(bases: Path, work: Path, rng: random.Random) -> tuple[list[str], str]:
    which = rng.choice(["gpt2", "llama"])
    data = (bases / which / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header, body = json.loads(data[8:8 + n]), data[8 + n:]
    kind = rng.random()
    if kind < 0.6:
        text, edit = mutate_json(header, rng, extra=["F64", "BF16", "I8", "BOOL", "X9", [11, 8], [0], [-1, 8],
                                                   [10**12, 10**12], [0, 10**15], [8, 4]])
        raw = text.encode("utf-8", "surrogatepass")
        out = struct.pack("<Q", len(raw)) + raw + body
    elif kind < 0.75:
        length = rng.choice([0, 1, n - 1, n + 1, len(data), 2**63, 2**64 - 1, 100 << 20])
        out, edit = struct.pack("<Q", length) + data[8:], f"header length {n} → {length}"
    elif kind < 0.9:
        cut = rng.randrange(len(data))
        out, edit = data[:cut], f"truncated at {cut} of {len(data)}"
    else:
        buf = bytearray(data)
        for _ in range(rng.choice([1, 4, 16])):
            buf[rng.randrange(min(len(buf), 8 + n))] = rng.randrange(256)
        out, edit = bytes(buf), "header bytes flipped"
    ckpt = work / "st"
    shutil.rmtree(ckpt, ignore_errors=True)
    ckpt.mkdir()
    shutil.copy(bases / which / "config.json", ckpt / "config.json")
    (ckpt / "model.safetensors").write_bytes(out)
    alg = GPT2 if which == "gpt2" else LLAMA
    return ["run", str(alg), "--weights", str(ckpt), "--input", "x=[[1, 2]]", "-o", str(work / "y.npz")], \
        f"{which} safetensors: {edit}"


def gguf_file(bases: Path, work: Path, rng: random.Random) -> tuple[list[str], str]:
    if rng.random() < 0.2:  # a GPT-2 file: an architecture --weights does not read, or not a weights file at all
        buf = bytearray((bases / "m.gguf").read_bytes())
        for _ in range(rng.choice([1, 4, 32])):
            buf[rng.randrange(min(len(buf), 256))] = rng.randrange(256)
        path = work / rng.choice(["m.gguf", "m.safetensors", "model.bin"])
        path.write_bytes(bytes(buf))
        return ["run", str(GPT2), *SIZES, "--weights", str(path), "--input", "x=[[1]]", "-o", str(work / "y.npz")], \
            f"gguf bytes flipped, named {path.name}"
    data = (bases / "llama.gguf").read_bytes()
    out, edit = _mutate_gguf(data, rng)
    path = work / "m.gguf"
    path.write_bytes(out)
    return ["run", str(LLAMA), "--weights", str(path), "--input", "x=[[1, 2]]", "-o", str(work / "y.npz")], \
        f"llama gguf: {edit}"


_GGUF_KEYS = [b"tokenizer.ggml.tokens", b"tokenizer.ggml.scores", b"general.architecture", b"llama.block_count",
              b"llama.embedding_length", b"llama.attention.head_count", b"llama.context_length", b"token_embd.weight",
              b"blk.0.attn_q.weight", b"blk.0.ffn_down.weight", b"output.weight"]


def _mutate_gguf(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One seeded edit of a GGUF file: bytes of its header, its length, a count, a type, a dim."""
    buf = bytearray(data)
    header = data.index(b"output_norm.weight") + 64  # the tensor infos end about here
    kind = rng.random()
    if kind < 0.3:
        for _ in range(rng.choice([1, 4, 32])):
            buf[rng.randrange(header)] = rng.randrange(256)
        return bytes(buf), "header bytes flipped"
    if kind < 0.45:
        cut = rng.randrange(len(data))
        return data[:cut], f"truncated at {cut} of {len(data)}"
    key = rng.choice(_GGUF_KEYS)
    at = data.index(key) + len(key) + rng.choice([0, 4, 8, 12, 16, 20])
    if kind < 0.8:
        value = rng.choice([0, 1, 10**9, 2**31, 2**32 - 1, 2**40, 2**63, 2**64 - 1])
        buf[at:at + 8] = struct.pack("<Q", value)
        return bytes(buf), f"8 bytes after {key.decode()} = {value}"
    value = rng.choice([0, 4, 6, 7, 8, 9, 12, 13, 20, 35, 2**31])
    buf[at:at + 4] = struct.pack("<I", value)
    return bytes(buf), f"4 bytes after {key.decode()} = {value}"


REGEXES = [r"(a+)+b", r"(a|a)*c", r"(", r"[", r"\p{Bogus}", r"(?<=a+)b", r"(.*)*x", "", r"\1", r"(?i)" * 500,
           r"a{1000000}", r"(x+x+)+y"]


def tokenizer(bases: Path, work: Path, rng: random.Random) -> tuple[list[str], str]:
    doc = json.loads((bases / "tokenizer.json").read_text(encoding="utf-8"))
    if rng.random() < 0.4:
        regex = rng.choice(REGEXES)
        doc["pre_tokenizer"]["pattern"] = {"Regex": regex}
        text, edit = json.dumps(doc), f"pre-tokenizer regex {regex[:30]!r}"
    else:
        text, edit = mutate_json(doc, rng, extra=[{"Regex": r"(a+)+b"}, {"String": ""}, "WordPiece", "BPE"])
    path = work / "tokenizer.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    prompt = rng.choice(["the cat", "a" * 3000 + "c", "x" * 30 + "y", "\x1b]0;t\x07", "ab bc"])
    return ["generate", str(GPT2), *SIZES, "--backend", "numpy", "--tokenizer", str(path), "--prompt", prompt], \
        f"tokenizer: {edit}"


def onnx_model(bases: Path, work: Path, rng: random.Random) -> tuple[list[str], str]:
    import onnx

    model = onnx.load(str(bases / "m.onnx"))
    kind = rng.random()
    if kind < 0.35:
        props = {p.key: p.value for p in model.metadata_props}
        key = rng.choice([*props, "token_bounds"])
        doc: Any = json.loads(props[key]) if key in props and props[key][:1] in "{[" else {"x": 11}
        text, what = mutate_json({"v": doc}, rng)
        value = text[len('{"v": '):-1] if rng.random() < 0.8 else rng.choice(["{", "[]", "\x1b[2J", "NaN"])
        del model.metadata_props[:]
        for k, v in {**props, key: value}.items():
            model.metadata_props.add(key=k, value=v)
        edit = f"metadata {key}: {what}"
    elif kind < 0.55:
        dim = model.graph.input[0].type.tensor_type.shape.dim[rng.randrange(2)]
        choice = rng.choice([0, -1, 1, 2**40, "n\x1b[2J", ""])
        if isinstance(choice, int):
            dim.dim_value = choice
        else:
            dim.dim_param = choice
        edit = f"input dim → {choice!r}"
    elif kind < 0.7:
        v = rng.choice([0, 1, 7, 25, 99, 2**31])
        model.opset_import[0].version = v if rng.random() < 0.7 else model.opset_import[0].version
        model.ir_version = rng.choice([model.ir_version, 0, 3, 99])
        model.producer_name = rng.choice(["pseudoformer", "\x1b]0;t\x07", "a" * 10000])
        edit = f"opset {model.opset_import[0].version}, ir {model.ir_version}"
    elif kind < 0.85:
        node = rng.choice(list(model.graph.node))
        if node.attribute:
            attr = rng.choice(list(node.attribute))
            if attr.type == onnx.AttributeProto.INT:
                attr.i = rng.choice([-(2**62), -5, 0, 5, 2**62])
            elif attr.type == onnx.AttributeProto.FLOAT:
                attr.f = rng.choice([float("nan"), float("inf"), -1.0, 0.0])
            elif attr.type == onnx.AttributeProto.INTS:
                attr.ints[:] = rng.choice([[], [2**40], [-7, 3], [0] * 9])
        edit = f"node {node.op_type} attribute"
    else:
        raw = bytearray(model.SerializeToString())
        for _ in range(rng.choice([1, 4, 32])):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        path = work / "m.onnx"
        path.write_bytes(bytes(raw))
        return ["run", str(path), "--input", "x=[[1, 2]]", "-o", str(work / "y.npz")], "onnx bytes flipped"
    path = work / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return ["run", str(path), "--input", "x=[[1, 2]]", "-o", str(work / "y.npz")], f"onnx {edit}"


KINDS: dict[str, Mutation] = {"config.json": config_json, "safetensors": safetensors, "gguf": gguf_file,
                              "tokenizer.json": tokenizer, "onnx": onnx_model}
