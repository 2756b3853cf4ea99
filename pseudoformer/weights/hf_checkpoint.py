"""HuggingFace checkpoint directories: config.json, the family table of each model type, (sharded) tensors.

Every family is a table (hf_gpt2, hf_bert, hf_bart, hf_llama: hf_table.Table) and one engine
(hf_engine) applies it. A new family is a new table listed in FAMILIES.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from pseudoformer.base.file_access import FileAccessError, loads_json, read_text

from . import (
    hf_bart,
    hf_bert,
    hf_engine,
    hf_gemma2,
    hf_gemma3,
    hf_gpt2,
    hf_gpt_neox,
    hf_llama,
    hf_mixtral,
    hf_phi3,
    hf_qwen3,
)
from .config_values import where
from .errors import WeightsError
from .hf_engine import Expected, Plan
from .hf_table import Table
from .safetensors_io import FOREIGN_FILES, PICKLE_SUFFIXES, open_safetensors, refuse_pickle
from .tensor_ref import TensorRef

FAMILIES: tuple[Table, ...] = (hf_gpt2.TABLE, hf_bert.TABLE, hf_bart.TABLE, *hf_llama.TABLES, hf_gpt_neox.TABLE,
                               hf_phi3.PHI3, hf_mixtral.MIXTRAL, hf_gemma2.TABLE, hf_gemma3.TABLE, hf_qwen3.TABLE)
TABLES: dict[str, Table] = {t: table for table in FAMILIES for t in table.model_types}
SUPPORTED = tuple(sorted(TABLES))
# Every algorithm whose parameters some table names (GPT2, BERT, Llama, ...).
MODEL_ALGORITHMS = frozenset(a for table in FAMILIES for a in table.algorithms)

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
        return loads_json(read_text(path, what, kind))  # NaN, Infinity and 1e999 refused
    except FileAccessError as e:
        raise WeightsError(e.message) from None
    except RecursionError:
        raise WeightsError(f"cannot read '{path}': JSON nested too deeply") from None
    except ValueError as e:  # not JSON, or an integer of thousands of digits
        raise WeightsError(f"cannot read '{path}': {e}") from None


def _model_type(config: Mapping[str, object], where: str | Path) -> str:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in TABLES:
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
    return hf_engine.hyperparameters(TABLES[_model_type(config_json, where(config_json))], config_json)


def _shard_path(directory: Path, name: object) -> Path:
    # The index is data from the checkpoint's author; keep it from pointing outside the directory.
    if not isinstance(name, str) or Path(name).name != name or not name.endswith(".safetensors"):
        raise WeightsError(
            f"'{directory / INDEX_FILE}': shard {name!r} is not a .safetensors file in the directory"
        )
    return directory / name


def _open_sharded(directory: Path) -> dict[str, TensorRef]:
    index_path = directory / INDEX_FILE
    index = _read_json(index_path, "shard index", "shard index")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise WeightsError(f"shard index '{index_path}' has no weight_map object")
    tensors: dict[str, TensorRef] = {}
    problems: list[str] = []
    for shard in sorted({_shard_path(directory, s) for s in weight_map.values()}):
        for name, ref in open_safetensors(shard).items():
            if name in tensors:
                problems.append(f"{name}: stored in more than one shard (again in {shard.name})")
            elif weight_map.get(name) != shard.name:
                problems.append(f"{name}: found in {shard.name}, but the index says {weight_map.get(name)!r}")
            tensors[name] = ref
    problems += [
        f"{n}: listed in the index for {s}, but not in it" for n, s in weight_map.items() if n not in tensors
    ]
    if problems:
        raise WeightsError(f"sharded checkpoint '{directory}' is inconsistent", sorted(problems))
    return tensors


def open_hf_tensors(directory: str | Path) -> dict[str, TensorRef]:
    """Every tensor of a HF checkpoint directory by its HF name, from safetensors files only, unread."""
    directory = Path(directory)
    if (directory / SINGLE_FILE).exists():
        return open_safetensors(directory / SINGLE_FILE)
    if (directory / INDEX_FILE).exists():
        return _open_sharded(directory)
    if any((directory / f).exists() for f in FOREIGN_FILES) or any(
        p.suffix in PICKLE_SUFFIXES for p in directory.iterdir()
    ):
        raise refuse_pickle(directory, directory=True)
    raise WeightsError(f"'{directory}' holds neither {SINGLE_FILE} nor {INDEX_FILE}")


def map_hf_checkpoint(directory: str | Path, expected: Expected | Collection[str], *,
                      group: str | None = None) -> Plan:
    """The plan that maps a HF checkpoint directory to our names (problems collected, not raised).

    Nothing but the headers is read: each planned tensor reads itself when loaded. ``group``: the
    parameter group the checkpoint fills (``theta`` for a ``θ : GPT2``), our names then under it.
    """
    config = read_hf_config(directory)
    model_type = _model_type(config, Path(directory) / "config.json")
    # The plan reads the hyperparameters, so unsupported variants are refused here too: weights never
    # load into a model that computes something other than what the checkpoint was trained for.
    return hf_engine.plan(TABLES[model_type], open_hf_tensors(directory), config, expected, group=group)


def table_for(config: Mapping[str, object]) -> Table:
    """The family table of a parsed config.json (its model_type checked)."""
    return TABLES[_model_type(config, where(config))]
