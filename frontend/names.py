"""The paper's names: split `W^l_mlp1`, `γ¹_l`, `X̃`, `t'`, `W^{e/d}_l` into parts, and spell them in ASCII.

A name is a base (a letter or a word, with accents and primes) and sub/superscripts. A script that
is an index variable in scope (`l` in `γ¹_l` inside `for l = 1, …, L`) selects a member of a family;
the other scripts are part of the name. The stable ASCII spelling (docs/language.md) is
  ascii(base) + "_" + script for each non-index script, superscripts first,
so γ¹_l → gamma_1, W^l_mlp1 → W_mlp1, W^{e/d}_l → W_e_d, X̃ → X_tilde, t' → t_prime, ℓ_max → ell_max.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

_SUPER = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹ʰˡⁱⁿᵉᵈᵏᵠᵛ", "0123456789hlinedkqv", strict=True))
_SUB = dict(zip("₀₁₂₃₄₅₆₇₈₉ₗₕᵢₜ", "0123456789lhit", strict=True))
_GREEK = {
    "α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "ε": "eps", "ϵ": "eps", "ζ": "zeta", "η": "eta",
    "θ": "theta", "ι": "iota", "κ": "kappa", "λ": "lambda", "μ": "mu", "ν": "nu", "ξ": "xi", "π": "pi",
    "ρ": "rho", "σ": "sigma", "τ": "tau", "υ": "upsilon", "φ": "phi", "ϕ": "phi", "χ": "chi", "ψ": "psi",
    "ω": "omega", "Γ": "Gamma", "Δ": "Delta", "Θ": "Theta", "Λ": "Lambda", "Ξ": "Xi", "Π": "Pi",
    "Σ": "Sigma", "Φ": "Phi", "Ψ": "Psi", "Ω": "Omega", "ℓ": "ell",
}
_LATEX_GREEK = {v if v != "eps" else "epsilon": k for k, v in _GREEK.items()} | {"varepsilon": "ε", "varphi": "φ"}
_ACCENTS = {"\u0303": "tilde", "\u0302": "hat", "\u0304": "bar", "\u0307": "dot"}
_SCRIPT_RE = re.compile(r"_\{([^{}]*)\}|\^\{([^{}]*)\}|_([A-Za-z0-9α-ωℓ]+)|\^([A-Za-z0-9α-ωℓ]+)|(['′]+)|(.)")


@dataclass(frozen=True)
class Name:
    base: str  # canonical Unicode base with accents composed: "X̃", "γ", "W", "layer_norm"
    sups: tuple[str, ...]
    subs: tuple[str, ...]
    primes: int = 0

    @property
    def scripts(self) -> tuple[tuple[str, str], ...]:
        return tuple(("^", s) for s in self.sups) + tuple(("_", s) for s in self.subs)

    def key(self, index_vars: frozenset[str] = frozenset()) -> str:
        """The name with index-variable scripts replaced by •: the key of a family."""
        sups = ",".join("•" if s in index_vars else s for s in self.sups)
        subs = ",".join("•" if s in index_vars else s for s in self.subs)
        return f"{self.base}{chr(39) * self.primes}^{sups}_{subs}"

    def indices(self, index_vars: frozenset[str]) -> tuple[str, ...]:
        return tuple(s for _, s in self.scripts if s in index_vars)

    @lru_cache(maxsize=65536)  # noqa: B019 (Names are frozen and few; elaboration asks for the same ones often)
    def ascii(self, index_vars: frozenset[str] = frozenset()) -> str:
        parts = [ascii_base(self.base)]
        parts += ["prime"] * self.primes
        parts += [ascii_script(s) for _, s in self.scripts if s not in index_vars]
        return "_".join(p for p in parts if p)

    def without_script(self, script: str) -> Name:
        return Name(self.base, tuple(s for s in self.sups if s != script),
                    tuple(s for s in self.subs if s != script), self.primes)

    def __str__(self) -> str:
        out = self.base + "'" * self.primes
        for s in self.sups:
            out += f"^{s}" if len(s) == 1 else f"^{{{s}}}"
        for s in self.subs:
            out += f"_{s}" if len(s) == 1 else f"_{{{s}}}"
        return out


@lru_cache(maxsize=65536)  # a model's few hundred names are parsed tens of thousands of times
def parse_name(text: str) -> Name:
    """Split a NAME token. LaTeX spellings (\\tilde{X}, \\gamma, \\mathcal{W}) map to the Unicode ones."""
    text = _delatex(text)
    m = re.match(r"([^\s_^'′" + "".join(_SUPER) + "".join(_SUB) + r"]+)", text)
    base = m.group(1) if m else text
    rest = text[len(base):]
    sups: list[str] = []
    subs: list[str] = []
    primes = 0
    for g in _SCRIPT_RE.finditer(rest):
        sub_b, sup_b, sub_s, sup_s, pr, ch = g.groups()
        if sub_b is not None:
            subs.append(_norm_script(sub_b))
        elif sup_b is not None:
            sups.append(_norm_script(sup_b))
        elif sub_s is not None:
            subs.append(sub_s)
        elif sup_s is not None:
            sups.append(sup_s)
        elif pr is not None:
            primes += len(pr)
        elif ch in _SUPER:
            sups.append(_SUPER[ch])
        elif ch in _SUB:
            subs.append(_SUB[ch])
    # A word with underscores (layer_norm, mask_token) that is not a letter plus scripts stays one word.
    if len(base) > 1 and subs and all(len(s) > 1 for s in subs) and base.isascii() and base.islower():
        base = base + "".join("_" + s for s in subs)
        subs = []
    return Name(unicodedata.normalize("NFC", base), tuple(sups), tuple(subs), primes)


def _norm_script(s: str) -> str:
    return _delatex(s).strip()


def _delatex(text: str) -> str:
    text = re.sub(r"\\(tilde|hat|bar)\{([^{}]*)\}",
                  lambda m: m.group(2) + {"tilde": "\u0303", "hat": "\u0302", "bar": "\u0304"}[m.group(1)], text)
    text = re.sub(r"\\(mathcal|mathbf|mathrm)\{([^{}]*)\}", lambda m: m.group(2), text)
    text = re.sub(r"\\([A-Za-z]+)", lambda m: _LATEX_GREEK.get(m.group(1), m.group(0)), text)
    return unicodedata.normalize("NFC", text)


def ascii_base(base: str) -> str:
    out = []
    for ch in unicodedata.normalize("NFD", base):
        if ch in _ACCENTS:
            out.append("_" + _ACCENTS[ch])
        elif ch in _GREEK:
            out.append(_GREEK[ch])
        elif ch.isascii():
            out.append(ch)
        else:
            # Mathematical alphanumerics (𝒲) decompose to their letter under NFKD.
            plain = unicodedata.normalize("NFKD", ch)
            out.append(plain if plain.isascii() else f"u{ord(ch):04x}")
    return "".join(out)


def ascii_script(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", ascii_base(s)).strip("_")


def unicode_name(text: str) -> str:
    """A name token as the paper prints it: LaTeX markup (\\tau, \\hat{x}) turned into its Unicode."""
    return _delatex(text)


def ascii_name(text: str) -> str:
    """The ASCII spelling of a whole name token, with every script kept."""
    return parse_name(text).ascii()


def did_you_mean(name: str, options: list[str]) -> tuple[str, ...]:
    close = difflib.get_close_matches(name, options, n=1)
    return (f"did you mean {close[0]}?",) if close else ()
