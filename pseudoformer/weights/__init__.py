"""Model parameters in the paper's layout: loading, mapping from HuggingFace, saving, random init.

Parameters are named tensors laid out as in Formal Algorithms for Transformers: features x
positions, and matrices W in R^{out x in} so that y = W x. A checkpoint is a HuggingFace directory
(config.json and safetensors shards), a GGUF file (gguf_checkpoint: dequantized, its Q4_0/Q8_0 blocks
kept for MatMulNBits) or a safetensors file of our own names; open_checkpoint (checkpoint.py) alone
tells which, and each reads its tensors one at a time. A pickled checkpoint is refused, never unpickled.
A HuggingFace family is a table (hf_table.Table: hf_gpt2, hf_bert, hf_bart, hf_llama, …) that one engine
(hf_engine) applies; map_hf_checkpoint plans a checkpoint's mapping, to read it one tensor at a time.

The names below are imported on first use, so that importing one module of this package (the TVM backend saves
its weights through safetensors_io) does not run the checkpoint readers.
"""

from pseudoformer.base.lazy_names import lazy_names

_NAMES = {
    "Checkpoint": "pseudoformer.weights.checkpoint",
    "TokenizerFile": "pseudoformer.weights.checkpoint",
    "checkpoint_directory": "pseudoformer.weights.checkpoint",
    "checkpoint_files": "pseudoformer.weights.checkpoint",
    "open_checkpoint": "pseudoformer.weights.checkpoint",
    "tokenizer_file": "pseudoformer.weights.checkpoint",
    "Problem": "pseudoformer.weights.errors",
    "WeightsError": "pseudoformer.weights.errors",
    "gguf_config": "pseudoformer.weights.gguf_checkpoint",
    "SUPPORTED": "pseudoformer.weights.hf_checkpoint",
    "hf_hyperparameters": "pseudoformer.weights.hf_checkpoint",
    "hf_model_type": "pseudoformer.weights.hf_checkpoint",
    "map_hf_checkpoint": "pseudoformer.weights.hf_checkpoint",
    "read_hf_config": "pseudoformer.weights.hf_checkpoint",
    "load_weights": "pseudoformer.weights.loader",
    "open_weights": "pseudoformer.weights.loader",
    "random_weights": "pseudoformer.weights.random_init",
    "save_weights": "pseudoformer.weights.safetensors_io",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
