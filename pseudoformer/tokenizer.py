"""Tokenizers from files a user gives, behind one guard: a tokenizer.json, a directory holding one, or a GGUF
file's vocabulary (weights/gguf_tokenizer.py), for `generate --prompt` and `train --tokenizer` alike.

The tokenizers library is Rust: a malformed file raises a bare Exception, and a pre-tokenizer regex that
backtracks without end makes it panic (a pyo3 PanicException, which derives from BaseException). Either is the
file's fault, said in one message naming it. What the library would take a long time over is bounded before it
sees it: a token longer than MAX_TOKEN_CHARS (a GGUF vocabulary's merges are recovered in time quadratic in a
token's length: one token of 1 MiB ran for minutes) and a regex longer than MAX_TOKENIZER_REGEX.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pseudoformer.base.errors import UsageError
from pseudoformer.base.file_access import loads_json, read_text
from pseudoformer.base.limits import MAX_TOKEN_CHARS, MAX_TOKENIZER_REGEX
from pseudoformer.base.terminal import quiet_native_stderr

T = TypeVar("T")


class TextTokenizer:
    """A tokenizers.Tokenizer and the file it came from; encode and decode run behind the guard."""

    def __init__(self, tokenizer: Any, path: str) -> None:
        self.tokenizer = tokenizer
        self.path = path

    def encode(self, text: str) -> list[int]:
        try:  # a command line's bytes that are not UTF-8 arrive as lone surrogates, which no tokenizer takes
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise UsageError(f"the text is not UTF-8 (byte 0x{ord(text[e.start]) & 0xFF:02x} at {e.start}): give "
                             "UTF-8 text") from None
        # The tokenizer's own post-processor decides on special tokens, as HF's tokenizer(text) does
        # (Llama's adds the beginning-of-sequence token).
        return list(guarded(self.path, lambda: self.tokenizer.encode(text).ids))

    def decode(self, ids: list[int]) -> str:
        return guarded(self.path, lambda: self.tokenizer.decode(ids))


def open_tokenizer(path: str | Path) -> TextTokenizer:
    """The tokenizer of a tokenizer.json, of a directory holding one, or of a GGUF file's metadata."""
    # Whether the file is GGUF (named so, or by its magic) is weights/checkpoint.py's to say.
    from pseudoformer.weights import tokenizer_file

    p = Path(path)
    if tokenizer_file(p).gguf:
        return TextTokenizer(_gguf(str(p)), str(p))
    if p.is_dir():
        p = p / "tokenizer.json"
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UsageError("reading a tokenizer needs the tokenizers package: pip install tokenizers") from None
    text = read_text(p, "tokenizer file", "tokenizer")
    _check_bounds(str(p), text)
    return TextTokenizer(guarded(str(p), lambda: Tokenizer.from_str(text), "is not a tokenizers tokenizer.json"),
                         str(p))


def _gguf(path: str) -> Any:  # -> tokenizers.Tokenizer
    from pseudoformer.weights import WeightsError
    from pseudoformer.weights.gguf_tokenizer import gguf_tokenizer

    def build() -> Any:
        try:
            return gguf_tokenizer(path)
        except WeightsError as e:
            raise UsageError(str(e)) from None

    return guarded(path, build, "does not describe a tokenizer tokenizers can build")


def _check_bounds(path: str, text: str) -> None:
    """Refuse a tokenizer.json whose vocabulary holds a token, or whose pre-tokenizer a regex, past the bounds."""
    try:
        data = loads_json(text)
    except (ValueError, RecursionError) as e:
        raise UsageError(f"tokenizer {path} is not JSON: {e}") from None
    vocab = data.get("model", {}).get("vocab") if isinstance(data, dict) and isinstance(data.get("model"), dict) \
        else None
    pieces = vocab if isinstance(vocab, dict) else [v[0] for v in vocab if isinstance(v, list) and v] \
        if isinstance(vocab, list) else []
    for piece in pieces:
        if isinstance(piece, str) and len(piece) > MAX_TOKEN_CHARS:
            raise UsageError(f"tokenizer {path} holds a token of {len(piece):,} characters; a token here is at most "
                             f"{MAX_TOKEN_CHARS:,}")
    for regex in _regexes(data):
        if len(regex) > MAX_TOKENIZER_REGEX:
            raise UsageError(f"tokenizer {path} holds a regex of {len(regex):,} characters; at most "
                             f"{MAX_TOKENIZER_REGEX:,} are taken")


def _regexes(value: object) -> Iterator[str]:
    """Every {"Regex": pattern} in the file, found without recursion (the JSON may nest deep)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if isinstance(v.get("Regex"), str):
                yield v["Regex"]
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def guarded(path: str | None, call: Callable[[], T], what: str = "failed") -> T:
    """A call into tokenizers on a file the user gave; any failure of the library, a Rust panic included, is one
    message naming the file."""
    try:
        with quiet_native_stderr():  # the panic's own message and backtrace, raw on fd 2
            return call()
    except UsageError:
        raise
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # noqa: BLE001 (a Rust panic is not an Exception)
        raise UsageError(f"tokenizer {path} {what}: {type(e).__name__}: {str(e)[:500]}") from None
