"""Grammar-aware mutations of the model files: what a careless user or an attacker might write.

Each mutation is one seeded edit of a .alg source (or of the .toml config beside it), aimed at what
the notation is made of: its tokens (swapped, dropped), its names (substituted), its numbers (made
huge, negative, NaN), its symbols (Unicode lookalikes, control characters), and its shape (very
long lines, very deep nesting). `mutate` returns the new text and a description that reproduces it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

MODELS = Path(__file__).resolve().parents[2] / "models"
TRAINING = Path(__file__).resolve().parents[1] / "frontend" / "training"

# A token of the notation: a name with its scripts, a number, or one symbol.
TOKEN = re.compile(r"[^\W\d]\w*(?:[_^]\{[^{}\s]*\}|[_^]\w)*'*|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\\[A-Za-z]+|\S")
NAME = re.compile(r"[^\W\d]\w*")
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

NUMBERS = ["0", "-1", "−1", "−0", "0.5", "1e308", "1e-320", "1e99999", "NaN", "nan", "inf", "∞", "2147483648",
           "18446744073709551616", "9" * 40, "9" * 100, "9" * 101, "9" * 5000, "1" + "0" * 30, "00000000007"]
KEYWORDS = ["for", "do", "end", "return", "if", "then", "while", "Algorithm", "Input", "Output", "use", "from",
            "length", "softmax", "exp", "max", "sample", "consisting", "of", "in", "∈", "ℕ", "ℝ", "V",
            "∇", "log", "randomly", "or", "{", "}", "θ"]
LOOKALIKES = {
    "a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "y": "у", "W": "Ԝ", "X": "Χ", "l": "ӏ",
    "−": "-", "-": "−", "←": "⟵", "ᵀ": "ᵗ", "∈": "ε", "ℝ": "R", "×": "x", "√": "✓", "Σ": "∑", ":": "∶",
    "(": "（", ")": "）", "[": "［", "=": "＝", "1": "𝟏", "ℓ": "l", "ε": "ϵ", "γ": "ɣ", "θ": "ϑ", ",": "‚",
    " ": "\u00a0",
}
CONTROLS = ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x1c", "\x7f", "\x85", "\u200b", "\u200e",
            "\u202e", "\u2028", "\ufeff", "\r", "\t", "\uffff", "\U0001f600"]
WRAPPERS = ["(", "exp(", "√(", "softmax(", "−", "[[", "max("]
CLOSERS = {"(": ")", "exp(": ")", "√(": ")", "softmax(": ")", "−": "", "[[": " > 0]]", "max(": ")"}
DEPTHS = [3, 20, 60, 99, 100, 101, 150, 400, 1000, 5000]

Edit = tuple[str, str]


def _tokens(text: str) -> list[re.Match[str]]:
    return list(TOKEN.finditer(text))


def _replace(text: str, m: re.Match[str] | tuple[int, int], new: str) -> str:
    a, b = m.span() if isinstance(m, re.Match) else m
    return text[:a] + new + text[b:]


def swap_tokens(text: str, rng: random.Random) -> Edit:
    toks = _tokens(text)
    i = rng.randrange(len(toks) - 1)
    j = i + 1 if rng.random() < 0.7 else rng.randrange(len(toks))
    a, b = sorted((toks[i], toks[j]), key=lambda m: m.start())
    if a.end() > b.start():
        return text, "swap nothing"
    new = text[:a.start()] + b.group() + text[a.end():b.start()] + a.group() + text[b.end():]
    return new, f"swap {a.group()!r}@{a.start()} and {b.group()!r}@{b.start()}"


def delete_token(text: str, rng: random.Random) -> Edit:
    m = rng.choice(_tokens(text))
    return _replace(text, m, ""), f"delete {m.group()!r}@{m.start()}"


def substitute_name(text: str, rng: random.Random) -> Edit:
    names = list(NAME.finditer(text))
    m = rng.choice(names)
    pool = [n.group() for n in names] + KEYWORDS + ["x" * rng.choice([1, 300, 20000]), "W_{" + "l" * 50 + "}",
                                                    "𝒲", "_", "ℓ_max", "N_V", "d_e", "H", "L"]
    new = rng.choice(pool)
    return _replace(text, m, new), f"name {m.group()!r}@{m.start()} → {new[:40]!r}"


def edit_number(text: str, rng: random.Random) -> Edit:
    new = rng.choice(NUMBERS)
    numbers = list(NUMBER.finditer(text))
    if numbers and rng.random() < 0.7:
        m = rng.choice(numbers)
        return _replace(text, m, new), f"number {m.group()!r}@{m.start()} → {new[:40]!r}"
    m = rng.choice(_tokens(text))  # a number where a name or symbol was
    return _replace(text, m, new), f"token {m.group()!r}@{m.start()} → number {new[:40]!r}"


def lookalike(text: str, rng: random.Random) -> Edit:
    spots = [i for i, c in enumerate(text) if c in LOOKALIKES]
    i = rng.choice(spots)
    return _replace(text, (i, i + 1), LOOKALIKES[text[i]]), f"lookalike for {text[i]!r}@{i}"


def control(text: str, rng: random.Random) -> Edit:
    i, c = rng.randrange(len(text) + 1), rng.choice(CONTROLS)
    return text[:i] + c + text[i:], f"insert {c!r}@{i}"


def long_line(text: str, rng: random.Random) -> Edit:
    lines = text.splitlines(keepends=True)
    i = rng.randrange(len(lines))
    n = rng.choice([1000, 20000, 200000])
    kind = rng.choice(["space", "comment", "token", "name"])
    line = lines[i].rstrip("\n")
    if kind == "space":
        line = line + " " * n
    elif kind == "comment":
        line = line + " /* " + "x" * n + " */"
    elif kind == "token":
        toks = _tokens(line) or _tokens(text)
        line = line + (" " + rng.choice(toks).group()) * (n // 10)
    else:
        line = "q" * n + line
    lines[i] = line + "\n"
    return "".join(lines), f"long line {i + 1} ({kind}, {n})"


def deep_nesting(text: str, rng: random.Random) -> Edit:
    """Wrap an operand of a body line in many levels, or make it a long chain of one operator."""
    body = [m for m in re.finditer(r"(?m)^\s*\d+\s+.*?(←|=)\s*(.+)$", text)]
    depth = rng.choice(DEPTHS)
    if not body:
        return control(text, rng)
    m = rng.choice(body)
    a, b = m.span(2)
    operand = rng.choice(NAME.findall(m.group(2)) or ["x"])
    if rng.random() < 0.3:
        op = rng.choice([" + ", " − ", " ⊙ ", " / ", " ", "ᵀ"])
        new = operand + (op + operand) * depth if op != "ᵀ" else operand + "ᵀ" * depth
        return text[:a] + new + text[b:], f"chain of {depth} {op.strip() or 'juxtapositions'!r} on line {m.group(0)[:20]!r}"
    w = rng.choice(WRAPPERS)
    new = w * depth + m.group(2) + CLOSERS[w] * depth
    return text[:a] + new + text[b:], f"nest {m.group(2)[:20]!r} in {depth} × {w!r}"


def line_edit(text: str, rng: random.Random) -> Edit:
    lines = text.splitlines(keepends=True)
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    kind = rng.choice(["duplicate", "swap", "drop", "truncate"])
    if kind == "duplicate":
        return "".join(lines[: i + 1] + lines[i:]), f"duplicate line {i + 1}"
    if kind == "drop":
        return "".join(lines[:i] + lines[i + 1:]), f"drop line {i + 1}"
    if kind == "truncate":
        k = rng.randrange(len(text))
        return text[:k], f"truncate at {k}"
    lines[i], lines[j] = lines[j], lines[i]
    return "".join(lines), f"swap lines {i + 1} and {j + 1}"


@cache
def _donor_lines() -> list[str]:
    files = sorted(MODELS.rglob("*.alg")) + sorted(TRAINING.glob("*.alg"))
    return [line for p in files for line in p.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def splice(text: str, rng: random.Random) -> Edit:
    """A line of another model put in place of one of this file's: well-formed, and wrong here."""
    donors = _donor_lines()
    lines = text.splitlines(keepends=True)
    i, new = rng.randrange(len(lines)), rng.choice(donors)
    if rng.random() < 0.5:
        lines[i] = new + "\n"
        return "".join(lines), f"line {i + 1} → {new.strip()[:60]!r}"
    return "".join(lines[:i] + [new + "\n"] + lines[i:]), f"insert {new.strip()[:60]!r} before line {i + 1}"


SOURCE_MUTATIONS: list[Callable[[str, random.Random], Edit]] = [
    swap_tokens, delete_token, substitute_name, edit_number, lookalike, control, long_line, deep_nesting, line_edit,
    splice,
]


def mutate_source(text: str, rng: random.Random) -> Edit:
    """One to three edits of a .alg source."""
    descriptions = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        text, what = rng.choice(SOURCE_MUTATIONS)(text, rng)
        descriptions.append(what)
    return text, "; ".join(descriptions)


def mutate_config(text: str, rng: random.Random) -> Edit:
    """An edit of a .toml config: a value made huge, negative, NaN or of the wrong kind, or a broken line."""
    values = list(re.finditer(r"(?m)^(\w+) = (.*)$", text))
    m = rng.choice(values)
    new = rng.choice(["0", "-1", "nan", "inf", "-inf", "1e308", "10000000000", "1000000", "9" * 30, "'text'",
                      "[1, 2]", "true", "{a = 1}", "1.5", "2" * 5000, "[" * 5000 + "]" * 5000])
    if rng.random() < 0.15:
        return _replace(text, m.span(), "= = ="), f"config line {m.group(1)} broken"
    return _replace(text, m.span(2), new), f"config {m.group(1)} = {new[:40]}"
