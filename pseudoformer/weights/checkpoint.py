"""open_checkpoint: what a --weights path is, decided here and nowhere else.

A path is one of three kinds:

  a directory                   a HuggingFace checkpoint: config.json, model.safetensors (or its shards),
                                tokenizer.json and the other files transformers writes beside them
  FILE.gguf, or a file that     llama.cpp's format, read as the HF checkpoint it was converted from
  starts with the bytes GGUF    (gguf_checkpoint.py); Ollama keeps its models as such files without a suffix
  FILE.safetensors              tensors under the model's own names (what save_weights and training write)

Anything else is refused with one message: a pickle checkpoint by name (it is never opened), config.json
given for its directory with that hint, any other file saying what is read.

Each kind is a Checkpoint answering the same questions, so the rest of the compiler asks instead of
looking at the path: ``describe()`` (a phrase naming it, for messages), ``config()`` (the HF config.json its
hyperparameters come from, or None), ``plan(expected)`` (our tensors, each read only when loaded: a
compile streams them one at a time, whatever the kind), ``tokenizer()`` (the file a prompt is encoded
with, or None) and ``directory`` (the HF directory whose other files an export carries along, or None).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from pseudoformer.base.file_access import FileAccessError
from pseudoformer.base.regular_file import NotRegularFile, open_regular
from pseudoformer.ir.block_coded import Codes

from .errors import Problem, WeightsError
from .gguf_checkpoint import block_codes, check_model, map_gguf, open_gguf
from .gguf_format import MAGIC
from .hf_checkpoint import hf_hyperparameters, map_hf_checkpoint, read_hf_config
from .safetensors_io import PICKLE_SUFFIXES, open_safetensors, refuse_pickle

TOKENIZER_FILE = "tokenizer.json"
# Files of a checkpoint directory listed (to refuse an output that would overwrite one) before giving up.
MAX_LISTED = 10_000


class Tensor(Protocol):
    """A checkpoint tensor known by its shape and dtype, read by ``load()`` (hf_engine.Planned, TensorRef)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def load(self) -> np.ndarray: ...


@dataclass
class CheckpointPlan:
    """Our parameters as one checkpoint holds them, none read yet."""

    tensors: Mapping[str, Tensor]  # by our names, in the order that reads each stored tensor once
    origin: dict[str, str] = field(default_factory=dict)  # our name -> the file's name for it, for complaints
    twins: dict[str, str] = field(default_factory=dict)  # {name: name it is the transpose of}, by the mapping
    codes: dict[str, Codes] = field(default_factory=dict)  # GGUF Q4_0/Q8_0 blocks a weight came from
    private: bool = False  # every tensor read is a buffer of its own (the loader need not copy it to own it)
    hint: str = ""  # added to a misfit: what the user probably meant
    checks: Callable[[], list[Problem]] = lambda: []  # the problems found by reading (a tied copy's values)
    release: Callable[[], None] = lambda: None  # forget what the plan holds of the tensor read last


@dataclass(frozen=True)
class TokenizerFile:
    """The file a prompt is encoded with: a tokenizers tokenizer.json, or a GGUF file's vocabulary
    (gguf_tokenizer.py)."""

    path: Path
    gguf: bool


class Checkpoint(ABC):
    kind: ClassVar[str]

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def directory(self) -> Path | None:
        """The HF checkpoint directory whose other files (config, tokenizer) an export copies; None for a file."""
        return None

    def describe(self) -> str:
        """``PATH is a HuggingFace 'llama' checkpoint``: said beside a complaint about its tensors."""
        return f"{self.path} is a {self.kind}"

    def config(self) -> dict[str, Any] | None:
        """The HF config.json the checkpoint's hyperparameters come from, or None when it has none."""
        return None

    def hyperparameters(self) -> dict[str, int | float] | None:
        """Our hyperparameter names (d_e, H, L, ...) from config(), checked; None without a config."""
        config = self.config()
        return None if config is None else hf_hyperparameters(config)

    @abstractmethod
    def plan(self, expected: Collection[str], *, group: str | None = None) -> CheckpointPlan:
        """Our tensors of ``expected`` (and any the file holds besides), unread; ``group``: the parameter
        group the checkpoint fills (``theta`` for ``θ : GPT2``), its names read under it."""

    def tokenizer(self) -> TokenizerFile | None:
        return None


class HFDirectory(Checkpoint):
    kind = "HuggingFace checkpoint directory"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._config = read_hf_config(path)  # a directory without one is no checkpoint: said now, once

    @property
    def directory(self) -> Path:
        return self.path

    def describe(self) -> str:
        return f"{self.path} is a HuggingFace {self._config.get('model_type')!r} checkpoint"

    def config(self) -> dict[str, Any]:
        return self._config  # itself, not a copy: a SourcedConfig names the file and key of each value

    def plan(self, expected: Collection[str], *, group: str | None = None) -> CheckpointPlan:
        plan = map_hf_checkpoint(self.path, expected, group=group)
        # safetensors copies each tensor out of the file into memory of its own (open_safetensors), and the
        # mapping's views of those are disjoint: no second copy is needed to own them.
        return CheckpointPlan(plan.tensors, plan.origin, plan.transposed_twins(), private=True, checks=plan.verify,
                              release=plan.release)

    def tokenizer(self) -> TokenizerFile | None:
        path = self.path / TOKENIZER_FILE
        return TokenizerFile(path, gguf=False) if path.is_file() else None


class GGUFCheckpointFile(Checkpoint):
    kind = "GGUF file"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._opened = open_gguf(path)  # the header parsed and checked; no tensor read
        check_model(self._opened)

    def describe(self) -> str:
        return f"{self.path} is a GGUF file of a {self._opened.config.get('model_type')!r} model"

    def config(self) -> dict[str, Any]:
        return self._opened.config  # its values named by metadata key (config_values.SourcedConfig)

    def plan(self, expected: Collection[str], *, group: str | None = None) -> CheckpointPlan:
        plan = map_gguf(self._opened, expected, group=group)
        infos = self._opened.infos
        # A complaint names the GGUF tensor (blk.0.attn_q.weight), which is what the user's file holds.
        origin = {name: infos[o].name if o in infos else o for name, o in plan.origin.items()}
        # Every tensor read is a buffer of its own (dequantized, or copied out of the map).
        return CheckpointPlan(plan.tensors, origin, plan.transposed_twins(), block_codes(self._opened, plan),
                              private=True, checks=plan.verify, release=plan.release)

    def tokenizer(self) -> TokenizerFile:
        return TokenizerFile(self.path, gguf=True)  # its vocabulary is in its metadata


class SafetensorsFile(Checkpoint):
    kind = "safetensors file of the model's own parameter names"

    def plan(self, expected: Collection[str], *, group: str | None = None) -> CheckpointPlan:
        refs = open_safetensors(self.path)
        if group and not any(name.startswith(f"{group}.") for name in refs):  # the model's own names
            refs = {f"{group}.{name}": ref for name, ref in refs.items()}
        hint = ""
        if refs and refs.keys().isdisjoint(expected) and (self.path.parent / "config.json").is_file():
            hint = f" (no names in common; to map HF names, pass the directory '{self.path.parent}')"
        return CheckpointPlan(refs, hint=hint)


def open_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint at ``path``, its kind decided by what the path is; raises WeightsError saying what
    is wrong with a path that is none of them. Nothing but headers and config.json is read."""
    path = Path(path).expanduser()
    if path.is_dir():
        return HFDirectory(path)
    if not path.exists():
        raise WeightsError(f"weights '{path}': no such file or directory")
    if _is_gguf(path):
        return GGUFCheckpointFile(path)
    if path.suffix in PICKLE_SUFFIXES:
        raise refuse_pickle(path)
    if path.suffix == ".safetensors":
        return SafetensorsFile(path)
    hint = "; pass the checkpoint directory instead" if path.name == "config.json" else ""
    raise WeightsError(
        f"weights '{path}': expected a .safetensors or .gguf file or a HuggingFace checkpoint directory{hint}"
    )


def tokenizer_file(path: str | Path) -> TokenizerFile:
    """A --tokenizer file: a GGUF file's vocabulary, or else a tokenizers tokenizer.json."""
    return TokenizerFile(Path(path), gguf=_is_gguf(Path(path)))


def checkpoint_directory(path: str | Path) -> Path | None:
    """The directory a --weights path is (a HF checkpoint's, to be), else None; nothing is read. For the checks
    made before any work (outputs.py), which leave what is wrong with the checkpoint to open_checkpoint."""
    path = Path(path).expanduser()
    return path if path.is_dir() else None


def checkpoint_files(path: str | Path) -> Iterator[Path]:
    """The files a checkpoint directory holds (none for a file, or a path that is not there), sorted, at
    most MAX_LISTED: what a command reads from ``--weights`` besides the path itself."""
    directory = checkpoint_directory(path)
    if directory is not None:
        try:
            yield from sorted(directory.iterdir())[:MAX_LISTED]
        except OSError:
            return


def _is_gguf(path: Path) -> bool:
    """Named .gguf, or a regular file of another name (not a pickle's) that starts with GGUF's magic."""
    if path.suffix == ".gguf":
        return True
    if path.suffix in PICKLE_SUFFIXES or path.suffix == ".safetensors":
        return False
    try:
        fd, _ = open_regular(path)  # a FIFO or a device is not opened, let alone read
    except (NotRegularFile, OSError):
        return False
    assert fd is not None
    try:
        return os.read(fd, len(MAGIC)) == MAGIC
    except OSError as e:  # a file that opens but cannot be read (/proc/self/mem: EIO)
        raise FileAccessError(f"cannot read {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
