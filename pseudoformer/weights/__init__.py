"""Model parameters in the paper's layout: loading, mapping from HuggingFace, saving, random init.

Parameters are named tensors laid out as in Formal Algorithms for Transformers: features x
positions, and matrices W in R^{out x in} so that y = W x. Only safetensors is ever read.
A HuggingFace family is a table (hf_table.Table: hf_gpt2, hf_bert, hf_bart, hf_llama) that one engine
(hf_engine) applies; map_hf_checkpoint plans a checkpoint's mapping, to read it one tensor at a time.
"""

from .errors import Problem, WeightsError
from .gguf_checkpoint import gguf_config
from .hf_checkpoint import SUPPORTED, hf_hyperparameters, hf_model_type, map_hf_checkpoint, read_hf_config
from .loader import load_weights, open_weights
from .random_init import random_weights
from .safetensors_io import save_weights

__all__ = [
    "SUPPORTED",
    "Problem",
    "WeightsError",
    "gguf_config",
    "hf_hyperparameters",
    "hf_model_type",
    "load_weights",
    "map_hf_checkpoint",
    "open_weights",
    "random_weights",
    "read_hf_config",
    "save_weights",
]
