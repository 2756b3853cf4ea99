"""GroupQueryAttention driven by attention_mask (`compile --genai-folder --contrib-ops`), without genai.

The op's reference (ir/ops/fused_kernels.py, `lengths`) against onnxruntime's kernel over a right-padded
batch, a prompt and two steps each fed the compact cache the previous one returned; the folder's graph,
fed as genai feeds it, gives each row of a padded batch the logits of that row alone; and a step the
rule cannot take keeps ONNX Attention with the padding mask, saying why. genai itself runs the folders in
test_genai_folder.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from pseudoformer.backends.onnx.compile import to_onnx
from pseudoformer.cli import main
from pseudoformer.ir import Graph, Node, Op, TensorType
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.types import DType
from tests.models.llama_cases import hf_model

HEADS = {"scale": 0.25, "q_heads": 2, "kv_heads": 1}
D, POSITIONS = 16, 32
ROWS = [7, 3]  # a right-padded batch: its rows' lengths


def _graph() -> Graph:
    f32, i64 = DType.float32, DType.int64
    qkv = Node(Op.INPUT, (), {"name": "qkv", "type": TensorType(f32, ("batch", "seq", 4 * D))})
    past = [Node(Op.INPUT, (), {"name": f"past_{w}", "type": TensorType(f32, ("batch", 1, "past", D))})
            for w in ("key", "value")]
    mask = Node(Op.INPUT, (), {"name": "mask", "type": TensorType(i64, ("batch", "past+seq"))})
    tables = [Node(Op.PARAM, (), {"name": t, "type": TensorType(f32, (POSITIONS, D // 2))}) for t in ("cos", "sin")]
    att = Node(Op.GROUP_QUERY_ATTENTION, (qkv, *past, *tables, mask),
               {**HEADS, "packed": True, "cached": True, "rotary": True, "lengths": True})
    outs = [("y", Node(Op.GET, (att,), {"index": 0})), ("key", Node(Op.GET, (att,), {"index": 1})),
            ("value", Node(Op.GET, (att,), {"index": 2}))]
    return Graph(inputs=[qkv, *past, mask], outputs=outs)


def test_the_lengths_reference_is_the_kernel_over_a_padded_batch() -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(3)
    angles = np.arange(POSITIONS)[:, None] * 0.5 ** np.arange(D // 2)[None, :]
    params = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
    graph = _graph()
    model = to_onnx(graph, params, contrib_ops=True)
    assert [n.op_type for n in model.graph.node].count("GroupQueryAttention") == 1
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    width = max(ROWS)
    mask = np.array([[1] * n + [0] * (width - n) for n in ROWS], np.int64)
    past = [np.zeros((len(ROWS), 1, 0, D), np.float32)] * 2
    for seq in (width, 1, 1):  # the prompt, then two steps
        feed = {"qkv": rng.standard_normal((len(ROWS), seq, 4 * D)).astype(np.float32), "past_key": past[0],
                "past_value": past[1], "mask": mask}
        got = dict(zip(("y", "key", "value"), session.run(None, feed), strict=True))
        want = run(graph, feed, params)
        for row, n in enumerate(mask.sum(axis=1)):
            real = slice(0, n) if seq > 1 else slice(None)  # a prompt's padded rows are the kernel's to leave
            np.testing.assert_allclose(got["y"][row, real], want["y"][row, real], atol=1e-5, rtol=1e-5)
        for w in ("key", "value"):  # the compact cache: each row's keys in front, zeros after
            np.testing.assert_allclose(got[w], want[w], atol=1e-6, rtol=1e-6)
        past = [got["key"], got["value"]]
        mask = np.concatenate([mask, np.ones((len(ROWS), 1), np.int64)], axis=1)


def _checkpoint(directory: Path, kind: str, **sizes: object) -> Path:
    hf_model(kind, seed=7, **sizes).save_pretrained(directory)
    return directory


@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral"])
def test_the_lengths_folder_gives_each_padded_row_its_own_logits(tmp_path: Path, kind: str) -> None:
    """The folder's graph on our onnxruntime, fed as genai feeds a GroupQueryAttention folder: a right-padded
    prompt with its attention_mask, then steps whose mask grows by a column and whose past is the present
    the kernel returned (a new one each step, or one buffer bound as both, as genai does with the folder's
    past_present_share_buffer). Each row's logits are those of the row alone (Mistral's window of 5
    included: the compact cache keeps padding out of it)."""
    import onnxruntime as ort

    weights = _checkpoint(tmp_path / "checkpoint", kind, hidden_size=64, head_dim=16)
    folder = tmp_path / "genai"
    assert main(["compile", f"models/{kind}.alg", "--weights", str(weights), "--genai-folder", str(folder),
                 "--contrib-ops"]) == 0
    config = json.loads((folder / "genai_config.json").read_text())
    dec = config["model"]["decoder"]
    assert "position_ids" not in dec["inputs"] and config["search"]["past_present_share_buffer"] is True
    ops = [n.op_type for n in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.node]
    assert ops.count("GroupQueryAttention") == dec["num_hidden_layers"] and "Attention" not in ops
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    layers, kv, head = dec["num_hidden_layers"], dec["num_key_value_heads"], dec["head_size"]
    past_names = [dec["inputs"][f"past_{w}_names"] % i for i in range(layers) for w in ("key", "value")]
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", *past_names]

    present_names = [dec["outputs"][f"present_{w}_names"] % i for i in range(layers) for w in ("key", "value")]

    def step(ids: np.ndarray, mask: np.ndarray, past: list) -> tuple[np.ndarray, list]:
        """One run; `past` of OrtValues (one shared buffer each, bound as past and present) or of arrays."""
        if isinstance(past[0], np.ndarray):
            logits, *present = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                                  **dict(zip(past_names, past, strict=True))})
            return logits, present
        binding = session.io_binding()
        binding.bind_cpu_input("input_ids", ids)
        binding.bind_cpu_input("attention_mask", mask)
        binding.bind_output("logits")  # the first output, as copy_outputs_to_cpu gives them in binding order
        for past_name, present_name, buffer in zip(past_names, present_names, past, strict=True):
            binding.bind_ortvalue_input(past_name, buffer)
            binding.bind_ortvalue_output(present_name, buffer)
        session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0], past

    def generate(prompts: list[list[int]], nxt: np.ndarray, shared: bool) -> list[np.ndarray]:
        width = max(map(len, prompts))
        ids = np.array([p + [0] * (width - len(p)) for p in prompts], dtype=np.int64)
        mask = np.array([[1] * len(p) + [0] * (width - len(p)) for p in prompts], dtype=np.int64)
        size = (len(prompts), kv, width + 4 if shared else 0, head)  # genai's shared buffer: max_length rows
        past = [ort.OrtValue.ortvalue_from_numpy(np.zeros(size, np.float32)) if shared else np.zeros(size, np.float32)
                for _ in range(2 * layers)]
        logits, past = step(ids, mask, past)
        scores = [logits[np.arange(len(prompts)), [len(p) - 1 for p in prompts]]]
        for _ in range(2):
            mask = np.concatenate([mask, np.ones((len(prompts), 1), np.int64)], axis=1)
            logits, past = step(nxt, mask, past)
            scores.append(logits[:, -1])
        return scores

    prompts, step_tokens = [[5, 17, 3, 44, 9, 12, 30], [7, 8, 9]], np.array([[11], [13]])
    for shared in (False, True):  # a new present each step, or genai's one buffer per layer (the folder's)
        both = generate(prompts, step_tokens, shared)
        for row, prompt in enumerate(prompts):
            alone = generate([prompt], step_tokens[row:row + 1], shared=False)
            for a, b in zip(both, alone, strict=True):
                np.testing.assert_allclose(a[row], b[0], atol=1e-4, rtol=1e-4)


def test_a_step_the_kernel_cannot_take_keeps_the_masked_attention(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    """Heads of 8 (the kernel rotates heads of a multiple of 16): the rotation stays outside, so the step
    keeps ONNX Attention with the padding mask and position_ids, and says why."""
    weights = _checkpoint(tmp_path / "checkpoint", "llama")
    folder = tmp_path / "genai"
    assert main(["compile", "models/llama.alg", "--weights", str(weights), "--genai-folder", str(folder),
                 "--contrib-ops"]) == 0
    err = capsys.readouterr().err
    assert "the folder's attention stays ONNX Attention with the padding mask" in err
    assert "rotation is not inside the kernel" in err
    config = json.loads((folder / "genai_config.json").read_text())
    assert config["model"]["decoder"]["inputs"]["position_ids"] == "position_ids"
