"""The prober's kinds of file content (tests/hostile/prober.py runs and judges them): arrays of every dtype and
layout, unusual .alg text, configs and checkpoint config.json files with one value of the wrong type or range,
tokenizer.json files that are no tokenizer, and GGUF metadata at the ends of its types."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tests.hostile.conftest import GPT2, SMALL_GPT2
from tests.hostile.prober import Probe, base_commands


def _npy(d: Path, name: str, array: np.ndarray, **kw: object) -> Path:
    path = d / f"{name}.npy"
    np.save(path, array, **kw)  # type: ignore[arg-type]
    return path


# Token files a model takes as they are (a layout or byte order numpy writes), and kinds it must refuse.
_TAKEN = ("Fortran order", "big-endian int64", "uint8")


def _odd_arrays(d: Path, ids: np.ndarray, tag: str) -> dict[str, Path]:
    """`ids` (a valid token array) in every dtype and layout numpy writes, and as what no token file is."""
    arrays = {
        "Fortran order": np.asfortranarray(np.stack([ids.reshape(-1)] * 2)), "big-endian int64": ids.astype(">i8"),
        "uint8": ids.astype(np.uint8), "three dimensions": ids.reshape(1, 1, -1), "a scalar": np.array(3),
        "float64": ids.astype(np.float64), "float64 with NaN": np.full(ids.shape, np.nan), "bool": ids > 3,
        "complex": ids.astype(np.complex128), "strings": ids.astype("<U3"), "bytes": ids.astype("S3"),
        "datetimes": ids.astype("datetime64[s]"), "a structured dtype": np.zeros(ids.shape, dtype=[("a", "<i8")]),
        "zero rows": np.zeros((0, ids.shape[-1]), np.int64), "zero columns": np.zeros((1, 0), np.int64),
        "int64 extremes": np.resize(np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max]), ids.shape),
        "uint64 max": np.full(ids.shape, np.iinfo(np.uint64).max, np.uint64), "negative ids": -1 - ids,
        "float16": ids.astype(np.float16),
    }
    paths = {name: _npy(d, f"{tag}_{name.replace(' ', '_')}", a) for name, a in arrays.items()}
    paths["Python objects"] = _npy(d, f"{tag}_objects", np.array([[1, "a"]], dtype=object), allow_pickle=True)
    v3 = d / f"{tag}_version3.npy"
    with open(v3, "wb") as fh:
        np.lib.format.write_array(fh, ids, version=(3, 0))
    paths["format 3.0"] = v3
    whole = _npy(d, f"{tag}_whole", ids).read_bytes()
    for name, data in {"a header cut short": whole[:20], "data cut short": whole[:-8],
                       "a header of a thousand-dimensional shape": whole[:10] + b"{'descr': '<i8', 'fortran_order': "
                       b"False, 'shape': (" + b"2, " * 1000 + b")}".ljust(118) + b"\n"}.items():
        paths[name] = d / f"{tag}_{name.replace(' ', '_')}.npy"
        paths[name].write_bytes(data)
    return paths


def data_probes(d: Path) -> Iterator[Probe]:
    """Arrays of every dtype and layout as run's --input and train's --data: a layout numpy writes is taken, every
    array that holds no token ids is refused with a message."""
    bases = base_commands(d)
    for name, path in _odd_arrays(d, np.array([[1, 2, 3, 4]]), "run").items():
        yield Probe(f"data: --input {name}", [*bases["run"], "--input", f"x={path}"], must_run=name in _TAKEN)
    for name, path in _odd_arrays(d, np.tile(np.arange(20), 20), "train").items():
        yield Probe(f"data: --data {name}", [*bases["train"], "--data", str(path)], may_run=name in _TAKEN)
    for inline in ("[[true, false]]", '[["a", "b"]]', "[[1.5, 2.5]]", "[[NaN, 1]]", "[[1e400, 1]]", "[[]]", "[]",
                   "[[[1, 2]]]", "[[1, 2]] trailing", "[[18446744073709551615, 1]]"):
        yield Probe(f"data: --input {inline}", [*bases["run"], "--input", f"x={inline}"])


_ALG = "Algorithm: y ← F(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n"


def _sources(d: Path) -> dict[str, bytes]:
    """One small algorithm, written with text an editor may show differently from what a parser reads."""
    ok = _ALG + "  1 ẑ ← x + x\n  2 return y = ẑ\n"
    deep = "".join(f"{'  ' * (i + 1)}{i + 1} for i{i} = 1, 2 do\n" for i in range(300))
    return {name: text.encode("utf-8") if isinstance(text, str) else text for name, text in {
        "the plain one": ok, "NUL in a comment": ok.replace("x + x", "x + x # a\x00b"), "NUL in code": ok.replace("x + x", "x\x00 + x"),
        "a byte-order mark": "\ufeff" + ok, "a byte that is not UTF-8": ok.encode().replace(b"+", b"\xff"),
        "an encoded surrogate": ok.encode().replace(b"+", b"\xed\xa0\x80"),
        "a zero-width space in a name": ok.replace("return y = ẑ", "return y = ẑ\u200b"),
        "a zero-width joiner in a name": ok.replace("1 ẑ", "1 ẑ\u200d"),
        "a decomposed twin of a name": ok.replace("return y = ẑ", "return y = z\u0302"),
        "a decomposed name beside its composed twin": ok.replace("  2 return y = ẑ", "  2 z\u0302 ← x\n"
                                                                 "  3 return y = ẑ"),
        "a hundred combining marks": ok.replace("ẑ", "z" + "\u0301" * 100),
        "a name of 100,000 letters": ok.replace("ẑ", "z" * 100_000),
        "loops nested 300 deep": _ALG + deep + "  1 return y = x\n",
        "an empty file": "", "a file of one comment": "# nothing\n",
        "tabs for indentation": ok.replace("  1", "\t1").replace("  2", "\t2"),
        "a line of a million spaces": ok.replace("x + x", "x +" + " " * 1_000_000 + "x"),
        "a thousand algorithms of one name": ok * 1000,
    }.items()}


def source_probes(d: Path) -> Iterator[Probe]:
    """Unusual source text: checked, or one located diagnostic; never a traceback."""
    for name, data in _sources(d).items():
        path = d / f"{name.replace(' ', '_').replace(',', '')}.alg"
        path.write_bytes(data)
        yield Probe(f"source: {name}", ["check", str(path)], may_run=True,
                    must_run=name == "the plain one")


def _toml(sizes: dict[str, object]) -> str:
    return "[hyperparameters]\n" + "".join(f"{k} = {v}\n" for k, v in sizes.items())


BAD_TOML_VALUES = ('"1"', "true", "1.5", "[1]", "1979-05-27", "99999999999999999999", "-1", "0", "{a = 1}", "nan",
                   "[" * 5000 + "]" * 5000)


def config_probes(d: Path) -> Iterator[Probe]:
    """A config whose every value is fine but one, of the wrong type or out of range: refused, naming it."""
    from tests.hostile.conftest import _GPT2

    for value in BAD_TOML_VALUES:
        path = d / f"bad{len(list(d.glob('bad*.toml')))}.toml"
        path.write_text(_toml({**_GPT2, "L": value}))
        yield Probe(f"config: L = {value[:20]}", ["check", GPT2, "--config", str(path)])
    for text in ("L = ", "[hyperparameters\n", "\xff", "[hyperparameters]\nL = 1\nL = 2\n", "[entry]\n"):
        path = d / f"bad{len(list(d.glob('bad*.toml')))}.toml"
        path.write_bytes(text.encode("latin-1"))
        yield Probe(f"config: {text[:20]!r}", ["check", GPT2, "--config", str(path)])


_HF_GPT2 = {"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8, "n_inner": 16, "n_positions": 6,
            "vocab_size": 11, "layer_norm_epsilon": 1e-5}
BAD_JSON_VALUES = ("true", "2.5", "null", '"2"', "1e20", "1" + "0" * 30, "-5", "0", "[2]", '{"a": 1}')


def hf_config_probes(d: Path) -> Iterator[Probe]:
    """A HF checkpoint's config.json with one field of the wrong type or out of range, or no object at all:
    refused, naming the file."""
    import json

    def checkpoint(name: str, text: str) -> Path:
        folder = d / f"hf_{len(list(d.glob('hf_*')))}"
        folder.mkdir()
        (folder / "config.json").write_text(text)
        (folder / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
        return folder

    good = json.dumps(_HF_GPT2)
    texts = {f"n_layer: {v[:12]}": good.replace('"n_layer": 1', f'"n_layer": {v}') for v in BAD_JSON_VALUES}
    texts.update({"a list": "[]", "a string": '"gpt2"', "null": "null", "nested 100,000 deep": "[" * 100_000,
                  "model_type a list": good.replace('"gpt2"', '["gpt2"]'),
                  "model_type a path": good.replace('"gpt2"', '"../../etc/passwd"'),
                  "model_type with an escape": good.replace('"gpt2"', '"gpt2\\u001b[31m"'),
                  "a key past the cap": good[:-1] + ', "x": "' + "x" * (2 << 20) + '"}'})
    for name, text in texts.items():
        yield Probe(f"config.json: {name}", ["compile", GPT2, "--weights", str(checkpoint(name, text)),
                                             "-o", str(d / "hf.onnx")])


def tokenizer_probes(d: Path) -> Iterator[Probe]:
    """A tokenizer.json that is no tokenizer: refused with a message by generate and train, never a panic."""
    bases = base_commands(d)
    texts = {"not JSON": "{", "a list": "[]", "an empty object": "{}", "nested 100,000 deep": "[" * 100_000,
             "an unknown model": '{"model": {"type": "Nope"}}',
             "a vocabulary of negative ids": '{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}}',
             "an id past int64": '{"model": {"type": "WordLevel", "vocab": {"a": 1' + "0" * 30 + '}, '
                                 '"unk_token": "a"}}',
             "an added token of no content": '{"model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}, '
                                             '"added_tokens": [{"id": 0}]}'}
    text = d / "text.txt"
    text.write_text("hello world " * 20)
    generate = ["generate", GPT2, *SMALL_GPT2, "--max-new-tokens", "2", "--prompt", "hello"]
    for name, content in texts.items():
        path = d / f"tok_{name.replace(' ', '_').replace(',', '')}.json"
        path.write_text(content)
        yield Probe(f"tokenizer: {name} (generate)", [*generate, "--tokenizer", str(path)])
        yield Probe(f"tokenizer: {name} (train)", [*bases["train"], "--data", str(text), "--tokenizer", str(path)])


# GGUF's metadata value types (gguf.GGUFValueType) and the values each is overwritten with: each end of the type,
# zero, and for floats the non-finite ones; a count written as a float (a type tag changed, 2.5) is tried too.
_GGUF_VALUES = {4: ("<I", (0, 2**32 - 1)), 5: ("<i", (-1, 0, 2**31 - 1)), 10: ("<Q", (0, 2**64 - 1)),
                11: ("<q", (-1, 2**63 - 1)), 7: ("<B", (2, 255)),
                6: ("<f", (float("nan"), float("inf"), -1.0, 0.0, 3e38, 1e-45)),
                12: ("<d", (float("nan"), 1e308, -1.0))}


def gguf_probes(d: Path) -> Iterator[Probe]:
    """Every numeric metadata value of a small llama GGUF at the ends of its type, and every integer one retyped as
    the float 2.5: taken, or refused with a message naming the file and key, never a crash."""
    import struct

    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFReader

    from tests.hostile.conftest import LLAMA
    from tests.models.llama_cases import hf_model
    from tests.weights.gguf_testlib import write_gguf

    path = d / "base.gguf"
    write_gguf(path, hf_model("llama", hidden_size=32, intermediate_size=64, head_dim=8, num_hidden_layers=1),
               "llama", lambda name, shape: Q.Q8_0)
    base = path.read_bytes()
    fields = [(name, int(f.types[0])) for name, f in GGUFReader(path).fields.items()
              if len(f.types) == 1 and int(f.types[0]) in _GGUF_VALUES and not name.startswith("GGUF.")]
    n = 0
    for name, kind in fields:
        key = name.encode()
        at = base.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)  # the value's type, then the value
        fmt, values = _GGUF_VALUES[kind]
        tries = [(f"{value}", struct.pack("<I", kind) + struct.pack(fmt, value)) for value in values]
        if fmt in ("<I", "<i"):
            tries.append(("2.5 (a float)", struct.pack("<I", 6) + struct.pack("<f", 2.5)))
        for shown, packed in tries:
            data = bytearray(base)
            data[at:at + len(packed)] = packed
            mutant = d / f"m{n}.gguf"
            n += 1
            mutant.write_bytes(bytes(data))
            yield Probe(f"gguf: {name} = {shown}", ["run", LLAMA, "--weights", str(mutant), "--input", "x=[[1, 2]]",
                                                     "-o", str(d / "y.npz")], may_run=True)
