"""HuggingFace checkpoint directories: config.json, model type dispatch, and (sharded) tensors."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pseudoformer.file_access import FileAccessError, read_text

from . import hf_bart, hf_bert, hf_gpt2, hf_llama
from .errors import WeightsError
from .hf_common import Collector
from .safetensors_io import FOREIGN_FILES, PICKLE_SUFFIXES, read_safetensors, refuse_pickle

Mapper = Callable[[Mapping[str, np.ndarray], Mapping[str, object], Collection[str]], Collector]

_HYPERPARAMETERS: dict[str, Callable[[Mapping[str, object]], dict[str, int | float]]] = {
    "gpt2": hf_gpt2.hyperparameters,
    "bert": hf_bert.hyperparameters,
    "bart": hf_bart.hyperparameters,
    **{t: hf_llama.hyperparameters for t in hf_llama.MODEL_TYPES},
}
MAPPERS: dict[str, Mapper] = {"gpt2": hf_gpt2.to_ours, "bert": hf_bert.to_ours, "bart": hf_bart.to_ours,
                              **{t: hf_llama.to_ours for t in hf_llama.MODEL_TYPES}}
SUPPORTED = tuple(sorted(MAPPERS))

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def read_hf_config(directory: str | Path) -> dict[str, Any]:
    """The parsed config.json of a HF checkpoint directory."""
    path = Path(directory) / "config.json"
    if not path.exists():
        raise WeightsError(f"'{directory}' is not a HuggingFace checkpoint directory: it has no config.json")
    config = _read_json(path, "config", "config")
    if not isinstance(config, dict):
        raise WeightsError(f"'{path}' does not hold a JSON object")
    return config


def _read_json(path: Path, what: str, kind: str) -> Any:
    try:
        return json.loads(read_text(path, what, kind))
    except FileAccessError as e:
        raise WeightsError(e.message) from None
    except RecursionError:
        raise WeightsError(f"cannot read '{path}': JSON nested too deeply") from None
    except ValueError as e:  # not JSON, or an integer of thousands of digits
        raise WeightsError(f"cannot read '{path}': {e}") from None


def _model_type(config: Mapping[str, object], where: str | Path) -> str:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in MAPPERS:
        raise WeightsError(
            f"{where}: model_type {model_type!r} is not supported; supported types: {', '.join(SUPPORTED)}"
        )
    return str(model_type)


def hf_model_type(directory: str | Path) -> str:
    """``model_type`` from the directory's config.json, checked to be one we can map."""
    return _model_type(read_hf_config(directory), Path(directory) / "config.json")


def hf_hyperparameters(config_json: Mapping[str, object]) -> dict[str, int | float]:
    """Our hyperparameter names (d_e, H, L or L_enc and L_dec, ell_max, N_V, d_mlp, eps, d_attn, d_mid[, d_f]).

    Raises WeightsError naming every config setting that describes a variant our model sources
    do not implement, since loading such weights would compute something else without complaint.
    """
    return _HYPERPARAMETERS[_model_type(config_json, "config.json")](config_json)


def _shard_path(directory: Path, name: object) -> Path:
    # The index is data from the checkpoint's author; keep it from pointing outside the directory.
    if not isinstance(name, str) or Path(name).name != name or not name.endswith(".safetensors"):
        raise WeightsError(
            f"'{directory / INDEX_FILE}': shard {name!r} is not a .safetensors file in the directory"
        )
    return directory / name


def _read_sharded(directory: Path) -> dict[str, np.ndarray]:
    index_path = directory / INDEX_FILE
    index = _read_json(index_path, "shard index", "shard index")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise WeightsError(f"shard index '{index_path}' has no weight_map object")
    tensors: dict[str, np.ndarray] = {}
    problems: list[str] = []
    for shard in sorted({_shard_path(directory, s) for s in weight_map.values()}):
        for name, array in read_safetensors(shard).items():
            if name in tensors:
                problems.append(f"{name}: stored in more than one shard (again in {shard.name})")
            elif weight_map.get(name) != shard.name:
                problems.append(f"{name}: found in {shard.name}, but the index says {weight_map.get(name)!r}")
            tensors[name] = array
    problems += [
        f"{n}: listed in the index for {s}, but not in it" for n, s in weight_map.items() if n not in tensors
    ]
    if problems:
        raise WeightsError(f"sharded checkpoint '{directory}' is inconsistent", sorted(problems))
    return tensors


def read_hf_tensors(directory: str | Path) -> dict[str, np.ndarray]:
    """All tensors of a HF checkpoint directory by their HF names, from safetensors files only."""
    directory = Path(directory)
    if (directory / SINGLE_FILE).exists():
        return read_safetensors(directory / SINGLE_FILE)
    if (directory / INDEX_FILE).exists():
        return _read_sharded(directory)
    if any((directory / f).exists() for f in FOREIGN_FILES) or any(
        p.suffix in PICKLE_SUFFIXES for p in directory.iterdir()
    ):
        raise refuse_pickle(directory, directory=True)
    raise WeightsError(f"'{directory}' holds neither {SINGLE_FILE} nor {INDEX_FILE}")


def map_hf_checkpoint(directory: str | Path, expected: Collection[str]) -> Collector:
    """Read a HF checkpoint directory and map it to our names (problems collected, not raised)."""
    config = read_hf_config(directory)
    model_type = _model_type(config, Path(directory) / "config.json")
    # Refuse unsupported variants here too, so weights never load into a model that computes
    # something other than what the checkpoint was trained for.
    hf_hyperparameters(config)
    return MAPPERS[model_type](read_hf_tensors(directory), config, expected)
