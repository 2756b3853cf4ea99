"""The tokenizer a GGUF file describes (tokenizer.ggml.*), built with `tokenizers` and written as tokenizer.json.

A GGUF holds no tokenizer.json: it lists the vocabulary, its scores or merges, the token types and the
special ids. Two kinds cover the files of every architecture read (Gemma's and Phi-3's sentencepiece with
their own space rules), built as transformers builds them from the same metadata
(integrations/gguf/gguf_tokenizer_mapping.py), so that the ids agree with
AutoTokenizer.from_pretrained(dir, gguf_file=…):

  "llama"  sentencepiece as BPE: merges recovered from the scores (each pair of pieces whose join is a
           token, best-scored join first), byte fallback, "▁" for spaces, a "▁" before the text
  "gpt2"   byte-level BPE with the file's merges, the text split by the regex of its `tokenizer.ggml.pre`

Control tokens (type 3) are special tokens and user-defined ones (type 4) added tokens, kept whole in text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf.constants import GGUFValueType

from pseudoformer.base.limits import MAX_TOKEN_CHARS

from .errors import WeightsError
from .gguf_format import GGUFFile

# tokenizer.ggml.pre → the regex that splits text before byte-level BPE (transformers' and llama.cpp's)
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
SPLITS = {"llama3": _LLAMA3, "llama-v3": _LLAMA3, "llama-bpe": _LLAMA3, "smaug-bpe": _LLAMA3, "qwen2": _QWEN2,
          "deepseek-r1-qwen": _QWEN2}
CONTROL, USER_DEFINED = 3, 4


def _meta(f: GGUFFile, key: str, kind: GGUFValueType, item: GGUFValueType | None = None) -> Any:
    v = f.metadata.get(key)
    if v is None:
        return None
    if v.type != kind or v.item != item:
        want = f"an array of {item.name}" if item is not None else kind.name
        raise f.error(f"metadata {key} is {v.describe()}, not {want}", at=None)
    return v.value


def gguf_tokenizer(path: str | Path):  # -> tokenizers.Tokenizer
    """The file's tokenizer; WeightsError naming what is missing or of a kind not built here."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    f = GGUFFile(path)
    S, A = GGUFValueType.STRING, GGUFValueType.ARRAY
    kind = _meta(f, "tokenizer.ggml.model", S)
    tokens = _meta(f, "tokenizer.ggml.tokens", A, S)
    if kind is None or tokens is None:
        raise f.error("holds no tokenizer (tokenizer.ggml.model and .tokens): give --tokenizer FILE", at=None)
    longest = max(range(len(tokens)), key=lambda i: len(tokens[i]), default=None)
    if longest is not None and len(tokens[longest]) > MAX_TOKEN_CHARS:
        raise f.error(f"tokenizer.ggml.tokens[{longest}] is {len(tokens[longest]):,} characters long; a token here is "
                      f"at most {MAX_TOKEN_CHARS:,}", at=None)
    types = _meta(f, "tokenizer.ggml.token_type", A, GGUFValueType.INT32)
    types = [int(t) for t in types] if types is not None else [1] * len(tokens)
    if len(types) != len(tokens):
        raise f.error(f"{len(types)} token types for {len(tokens)} tokens", at=None)
    arch = _meta(f, "general.architecture", S) or ""
    if kind == "llama" and arch.startswith("gemma"):
        # Gemma stores a token of only spaces as spaces, and its scores do not follow its merges: the order
        # of the tokens does (transformers' gemma_tokenizer, the same two fixes).
        tokens = ["▁" * len(t) if t and not t.strip(" ") else t for t in tokens]
    vocab = {t: i for i, t in enumerate(tokens)}
    if kind == "llama":
        scores = _meta(f, "tokenizer.ggml.scores", A, GGUFValueType.FLOAT32)
        if scores is None or len(scores) != len(tokens):
            raise f.error("a sentencepiece ('llama') vocabulary needs one score per token", at=None)
        if arch.startswith("gemma"):
            scores = [-float(i) for i in range(len(tokens))]
        unk = _meta(f, "tokenizer.ggml.unknown_token_id", GGUFValueType.UINT32)
        tok = Tokenizer(models.BPE(vocab, _spm_merges(tokens, scores, vocab), fuse_unk=True, byte_fallback=True,
                                   unk_token=tokens[unk] if unk is not None and unk < len(tokens) else None))
        decode = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
        if arch.startswith("gemma"):  # GemmaTokenizer: every space a "▁", nothing put before the text
            tok.normalizer = normalizers.Replace(" ", "▁")
            tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
        elif arch == "phi3":  # Phi-3's tokenizer.json: a "▁" before each stretch of text, by a normalizer, so
            # also after a special token (transformers' phi3_tokenizer rebuilds it so from a GGUF)
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
            decode += [decoders.Strip(content=" ", left=1)]
        else:
            prefix = _meta(f, "tokenizer.ggml.add_space_prefix", GGUFValueType.BOOL)
            prefix = True if prefix is None else prefix
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first" if prefix else
                                                         "never", split=False)
            decode += [decoders.Strip(content=" ", left=1)] if prefix else []
        tok.decoder = decoders.Sequence(decode)
        default_bos = True  # llama.cpp adds BOS to a sentencepiece vocabulary unless the file says not to
    elif kind == "gpt2":
        merges = _meta(f, "tokenizer.ggml.merges", A, S)
        if merges is None:
            raise f.error("a byte-level ('gpt2') vocabulary needs tokenizer.ggml.merges", at=None)
        pairs = [tuple(m.split(" ", 1)) for m in merges]
        if any(len(p) != 2 for p in pairs):
            raise f.error("tokenizer.ggml.merges holds an entry that is not two tokens", at=None)
        tok = Tokenizer(models.BPE(vocab, pairs))
        split = SPLITS.get(_meta(f, "tokenizer.ggml.pre", S) or "")
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split is None)
        tok.pre_tokenizer = byte_level if split is None else pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(split), behavior="isolated"), byte_level])
        tok.decoder = decoders.ByteLevel()
        default_bos = False
    else:
        raise f.error(f"tokenizer model {kind!r} is not built here (llama, gpt2): give --tokenizer FILE", at=None)
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t, k in zip(tokens, types, strict=True) if k == CONTROL])
    tok.add_tokens([AddedToken(t, normalized=False, special=False)
                    for t, k in zip(tokens, types, strict=True) if k == USER_DEFINED])
    bos = _meta(f, "tokenizer.ggml.bos_token_id", GGUFValueType.UINT32)
    add_bos = _meta(f, "tokenizer.ggml.add_bos_token", GGUFValueType.BOOL)
    if (default_bos if add_bos is None else add_bos) and bos is not None and bos < len(tokens):
        tok.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]}:0 $A:0", pair=f"{tokens[bos]}:0 $A:0 {tokens[bos]}:1 $B:1",
            special_tokens=[(tokens[bos], bos)])
    return tok


def _spm_merges(tokens: list[str], scores: Any, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Sentencepiece has no merges; BPE over its pieces needs them: every split of a token into two tokens,
    the merges of better-scored tokens first (transformers' generate_merges, which its GGUF reader uses)."""
    merges = []
    for token, score in zip(tokens, scores, strict=True):
        local = [(token[:i], token[i:], float(score)) for i in range(1, len(token))
                 if token[:i] in vocab and token[i:] in vocab]
        merges += sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]]))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(a, b) for a, b, _ in merges]


def write_gguf_tokenizer(gguf_path: str | Path, out: str | Path) -> Path:
    """The file's tokenizer written as a tokenizers tokenizer.json at `out`."""
    try:
        tok = gguf_tokenizer(gguf_path)
    except ImportError:
        raise WeightsError("reading a GGUF file's tokenizer needs the tokenizers package: pip install tokenizers") \
            from None
    tok.save(str(out))
    return Path(out)
