"""Every command-line flag that README.md and docs/*.md name exists in the parser (pseudoformer/cli.py), and
every flag of every subcommand is named in them.

The flags are read from the parser itself (build_parser), so a flag added to the command line is known
here at once. In the docs, flags are looked for in code: shell blocks and `inline` spans. A flag after
`pseudoformer SUBCOMMAND` must be one of that subcommand's (and the subcommand one of the parser's);
a flag right after `pseudoformer` one of the top level's; a flag standing alone (`--padding-mask`) one
of any subcommand's; a flag after another program (`python benchmarks/bench_quant.py --part`, `pip`)
is that program's and is not checked. The other way, a subcommand's flag is documented where a page names it
(any of its spellings: `-o` for `--output`) after `pseudoformer SUBCOMMAND`, or standing alone (a flag several
subcommands share, `--weights`), also inside a usage line's brackets (`[--provider cpu|cuda]`).
"""

from __future__ import annotations

import argparse
import re
import shlex

from pseudoformer.cli import build_parser
from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
SHELL = ("", "sh", "bash", "shell", "console")
SEPARATORS = ("&&", "||", "|", ";")
OTHER_PROGRAMS = ("python", "python3", "pip", "pip3", "pytest", "git", "ruff", "uv", "genai", "optimum-cli", "torchrun")


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}


def parser_flags() -> tuple[set[str], dict[str, set[str]]]:
    """The top-level parser's flags, and each subcommand's (its own and the top level's)."""
    top = build_parser()
    common = _flags(top)
    subs: dict[str, set[str]] = {}
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            subs = {name: _flags(p) | common for name, p in action.choices.items()}
    return common, subs


def commands(text: str) -> list[str]:
    """The pieces of code in a page that may hold a command: shell lines (continuations joined) and
    inline spans outside the fenced blocks."""
    out: list[str] = []
    for lang, body in FENCE.findall(text):
        if lang in SHELL:
            out += [line for line in body.replace("\\\n", " ").splitlines() if line.strip()]
    out += INLINE.findall(FENCE.sub("", text))
    return out


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)  # `a; b`, `a && b`: separate tokens
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote in a span of prose
        return command.split()


def named_flags(command: str) -> list[tuple[str | None, str]]:
    """(subcommand, flag) for every flag one command names after `pseudoformer SUBCOMMAND` (None: standing
    alone), as written: `--output`, `-o`, `-O2`."""
    program: str | None = None
    out: list[tuple[str | None, str]] = []
    for token in _tokens(command):
        if token in SEPARATORS:
            program = None
        elif token == "pseudoformer" or token.endswith("/bin/pseudoformer"):
            program = "pseudoformer"
        elif program == "pseudoformer" and re.fullmatch(r"[a-z][a-z-]*", token):
            program = token
        elif token in OTHER_PROGRAMS or token.endswith(".py") or token == "-m":
            program = ""
        elif (m := re.match(r"\[?(--?[A-Za-z][A-Za-z0-9-]*)", token)) and program != "":
            out.append((None if program in (None, "pseudoformer") else program, m.group(1).rstrip("-")))
    return out


def documented(sub: str, strings: list[str], named: set[tuple[str | None, str]]) -> bool:
    """Whether one of an option's spellings is named for `sub` or standing alone; a short one may carry its
    value (`-O2`, `-Dd_e=8`)."""
    for where, flag in named:
        if where not in (None, sub):
            continue
        for s in strings:
            if flag == s or (len(s) == 2 and flag.startswith(s) and not flag.startswith("--")):
                return True
    return False


def unknown_flags(command: str, common: set[str], subs: dict[str, set[str]]) -> list[str]:
    """What in one command names a flag or subcommand the parser does not have."""
    tokens = _tokens(command)
    anywhere = set().union(common, *subs.values())
    program: str | None = None  # None: no program named (a bare flag); "": another program's
    bad: list[str] = []
    for token in tokens:
        if token in SEPARATORS:
            program = None
        elif token == "pseudoformer" or token.endswith("/bin/pseudoformer"):
            program = "pseudoformer"
        elif program == "pseudoformer" and re.fullmatch(r"[a-z][a-z-]*", token):
            program = token  # a subcommand (prose may name one still to come; its flags cannot be checked)
        elif token in OTHER_PROGRAMS or token.endswith(".py") or token == "-m":
            program = ""
        elif (m := re.match(r"--[a-z][a-z0-9-]*", token)) and program != "":
            flag = m.group().rstrip("-")  # `--flag=value`, `--flag:` in a sentence
            allowed = anywhere if program is None else common if program == "pseudoformer" else subs.get(program)
            if allowed is None:
                bad.append(f"{flag}: pseudoformer {program} is not a subcommand")
            elif flag not in allowed:
                where = f"pseudoformer {program}" if program and program != "pseudoformer" else "the parser"
                bad.append(f"{flag}: not a flag of {where}")
    return bad


def test_every_flag_in_the_docs_is_in_the_parser() -> None:
    common, subs = parser_flags()
    problems = [f"{page.relative_to(ROOT)}: `{command}`: {p}"
                for page in DOCS for command in commands(page.read_text(encoding="utf-8"))
                for p in unknown_flags(command, common, subs)]
    assert not problems, "\n".join(problems)


def test_every_flag_of_every_subcommand_is_in_the_docs() -> None:
    named = {n for page in DOCS for command in commands(page.read_text(encoding="utf-8"))
             for n in named_flags(command)}
    top = build_parser()
    missing = []
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, parser in action.choices.items():
                for option in parser._actions:
                    strings = [s for s in option.option_strings if s not in ("-h", "--help")]
                    if strings and not documented(sub, strings, named):
                        missing.append(f"pseudoformer {sub} {'/'.join(strings)}")
    assert not missing, "flags no page of the docs names:\n" + "\n".join(missing)


def test_the_other_way_finds_what_is_not_documented() -> None:
    named = set(named_flags("pseudoformer compile m.alg -O2 -o m.onnx [--quantize int4]")) | {(None, "--weights")}
    assert documented("compile", ["-O"], named) and documented("compile", ["-o", "--output"], named)
    assert documented("compile", ["--quantize"], named) and documented("train", ["--weights"], named)
    assert not documented("train", ["--quantize"], named) and not documented("compile", ["--opset"], named)


def test_the_check_finds_what_is_not_there() -> None:
    """The checker itself: a made-up flag is found where it is a pseudoformer flag, not elsewhere."""
    common, subs = parser_flags()
    assert {"compile", "generate", "inspect", "run", "check"} <= subs.keys()
    assert "--quantize" in subs["compile"] and "--version" in common
    page = "\n".join([
        "Use `--padding-mask` or `--no-such-flag`; `python benchmarks/bench_quant.py --part ops` is not ours.",
        "```sh",
        "pseudoformer compile models/gpt2.alg --quantize int4 \\",
        "    --prompt-ids '1 2'   # generate's flag, not compile's",
        "pip install --upgrade pseudoformer && pseudoformer run m.onnx --input x=1.npy -o y.npz",
        "pseudoformer frobnicate --help",
        "pseudoformer --version; pseudoformer --quantize int4",
        "pseudoformer compile m.alg --dtype=float16   # with --contrib-ops: the same",
        "```",
    ])
    found = [p for c in commands(page) for p in unknown_flags(c, common, subs)]
    assert found == ["--prompt-ids: not a flag of pseudoformer compile",
                     "--help: pseudoformer frobnicate is not a subcommand",
                     "--quantize: not a flag of the parser", "--no-such-flag: not a flag of the parser"]
