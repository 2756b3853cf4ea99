"""The op names of the IR. What each op means and how it types is defined once, in its family's module
(ir/ops/*.py), and registered under its name here; see registry.py."""

from __future__ import annotations

import enum


class Op(enum.Enum):
    # leaves (leaves.py)
    INPUT = "input"
    PARAM = "param"
    CONST = "const"
    # elementwise (elementwise.py, gelu.py, glu.py)
    NEG = "neg"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    TANH = "tanh"
    ERF = "erf"
    SIN = "sin"
    COS = "cos"
    ABS = "abs"
    RELU = "relu"
    FLOOR = "floor"
    CEIL = "ceil"
    GELU = "gelu"
    SILU = "silu"
    NOT = "not"
    CAST = "cast"
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MOD = "mod"
    MAX = "max"
    MIN = "min"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    AND = "and"
    OR = "or"
    WHERE = "where"
    # products, data movement, reductions (matmul.py, movement.py, reductions.py, gather.py,
    # scatter.py)
    MATMUL = "matmul"
    TRANSPOSE = "transpose"
    UNSQUEEZE = "unsqueeze"
    SQUEEZE = "squeeze"
    RESHAPE = "reshape"
    CONCAT = "concat"
    REDUCE_SUM = "reduce_sum"
    REDUCE_MAX = "reduce_max"
    REDUCE_MEAN = "reduce_mean"
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"  # log_softmax.py: made by the training pipeline
    CUMSUM = "cumsum"
    TOPK = "topk"  # selection.py
    EXPERT_MATMUL = "expert_matmul"  # experts.py: made by a pass
    GATHER = "gather"
    GATHER_ELEMENTS = "gather_elements"  # gather_elements.py
    SCATTER = "scatter"
    SCATTER_ADD = "scatter_add"
    SCATTER_ADD_ELEMENTS = "scatter_add_elements"  # scatter_elements.py: GATHER_ELEMENTS' transpose
    # shaped like an operand read for its shape only, and a matrix's view of a tensor (shaped_like.py,
    # flatten.py): what the VJP rules write for zeros, broadcasts, a slice's transpose, batched products
    EXPAND = "expand"
    PAD = "pad"
    FLATTEN = "flatten"
    RESHAPE_LIKE = "reshape_like"
    # sizes and index sets known only at run time (sizes.py)
    DIM = "dim"
    ARANGE = "arange"
    SLICE = "slice"
    INDEX_MASK = "index_mask"
    # fused ops, made by passes; the frontend never emits them (norms.py, attention.py, glu.py, rotary.py)
    LAYER_NORM = "layer_norm"
    RMS_NORM = "rms_norm"
    ATTENTION = "attention"
    CACHED_ATTENTION = "cached_attention"
    BUFFERED_ATTENTION = "buffered_attention"
    SWIGLU = "swiglu"
    ROTARY = "rotary"
    # onnxruntime's contrib kernels, made by the onnx-contrib pipeline (fused_kernels.py)
    SKIP_RMS_NORM = "skip_rms_norm"
    SKIP_LAYER_NORM = "skip_layer_norm"
    GROUP_QUERY_ATTENTION = "group_query_attention"
    # block-quantized weights, made by the quantize pass (quantized.py)
    MATMUL_NBITS = "matmul_nbits"
    GATHER_NBITS = "gather_nbits"
    # several results (tuples.py)
    GET = "get"
