"""`pseudoformer compile --genai-folder`: onnxruntime-genai runs the folder and generates our tokens.

Greedy tokens from genai (its own environment, tests/genai/genai_env.py) equal `Generator`'s, token for
token, for Llama, Qwen2 and GPT-2 at a tiny size and at SmolLM2-135M's widths (random weights, 4 layers), in
float32 and int4, and for a batch of two prompts of different lengths (genai pads on the right: each row must continue
from its own last token). Without genai, the folder's graph is still checked on our onnxruntime: a
right-padded batch with its position_ids gives each row's unpadded logits.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from pseudoformer.cli import main
from pseudoformer.generation import Generator, Sampling
from pseudoformer.model import load
from tests.conftest import ROOT
from tests.genai.genai_env import ask_genai, genai_greedy, genai_python
from tests.models.llama_cases import SMOLLM2, hf_model
from tests.models.neox_phi3_cases import hf_model as neox_phi3_model

NEW = 12
PROMPT = [5, 17, 3, 44, 9, 12, 30]
SHORT = [7, 8, 9]  # ids that are no family's pad or end token here
GPT2_TINY = dict(n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=61, bos_token_id=0, eos_token_id=0,
                 initializer_range=0.2)  # weights large enough that greedy tokens vary
# SmolLM2-135M's widths (d_e 576, a vocabulary of 49152, 9 heads of 64, 3 of them key/value heads) with 4 of its
# 30 layers, which keeps CI's time in bounds: each layer is the same graph, the widths are what a shape bug needs.
LAYERS = 4
SMOL = {**SMOLLM2, "num_hidden_layers": LAYERS}
GPT2_SMOL = dict(n_embd=576, n_head=9, n_layer=LAYERS, n_positions=512, vocab_size=49152, bos_token_id=0,
                 eos_token_id=0)
SOURCES = {"llama": "models/llama.alg", "qwen2": "models/qwen2.alg", "gpt2": "models/gpt2.alg",
           "mistral": "models/mistral.alg", "gpt_neox": "models/gpt_neox.alg", "phi3": "models/phi3.alg",
           "mixtral": "models/mixtral.alg"}
# A sliding window counts the cache's columns, padding included (docs/generation.md): a right-padded row is
# exact only while the window holds the whole sequence, so the batch tests give Mistral and Phi-3 a long one.
LONG_WINDOW = {"mistral": {"sliding_window": 256}, "phi3": {"sliding_window": 256}, "mixtral": {"sliding_window": 256}}


def _checkpoint(kind: str, size: str, directory: Path) -> Path:
    if kind == "gpt2":
        torch.manual_seed(5)
        config = GPT2Config(**(GPT2_TINY if size == "tiny" else GPT2_SMOL))
        GPT2LMHeadModel(config).eval().save_pretrained(directory)
    elif kind == "mixtral":  # the routing's experts: tests/models/test_mixtral_vs_hf.py's tiny Mixtral
        from transformers import MixtralConfig, MixtralForCausalLM

        from tests.models.test_mixtral_vs_hf import TINY as MIXTRAL

        torch.manual_seed(7)
        MixtralForCausalLM(MixtralConfig(**{**MIXTRAL, **LONG_WINDOW[kind]})).eval().save_pretrained(directory)
    elif kind in ("gpt_neox", "phi3"):
        neox_phi3_model(kind, seed=7, **LONG_WINDOW.get(kind, {})).save_pretrained(directory)
    else:
        hf_model(kind, seed=7, **({} if size == "tiny" else SMOL), **LONG_WINDOW.get(kind, {})).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return {}


def _get(checkpoints: dict, tmp_path_factory: pytest.TempPathFactory, kind: str, size: str) -> Path:
    if (kind, size) not in checkpoints:
        checkpoints[kind, size] = _checkpoint(kind, size, tmp_path_factory.mktemp(f"{kind}-{size}"))
    return checkpoints[kind, size]


def _folder(source: str, weights: Path, out: Path, *flags: str) -> Path:
    assert main(["compile", source, "--weights", str(weights), "--genai-folder", str(out), *flags]) == 0
    return out


def _ours(source: str, weights: Path, prompts: list[list[int]], quantize: str | None = None) -> list[list[int]]:
    gen = Generator(load(source, weights=weights), quantize=quantize)
    return [gen.generate(p, max_new_tokens=NEW, sampling=Sampling(temperature=0)).tokens[0] for p in prompts]


def _eos(folder: Path) -> set[int]:
    eos = json.loads((folder / "genai_config.json").read_text())["model"]["eos_token_id"]
    return set(eos if isinstance(eos, list) else [eos])


def _until_eos(tokens: list[int], eos: set[int]) -> list[int]:
    """genai stops a row at its end token; ours was asked for every token."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[:i + 1]
    return tokens


CASES = [(kind, "tiny", None) for kind in SOURCES] + [("llama", "tiny", "int4"), ("qwen2", "tiny", "int4")] + \
    [(kind, "smollm2", None) for kind in ("llama", "qwen2", "gpt2")] + [("llama", "smollm2", "int4")]


@pytest.mark.parametrize(("kind", "size", "quantize"), CASES, ids=lambda v: str(v))
def test_genai_generates_our_tokens(checkpoints: dict, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path,
                                    kind: str, size: str, quantize: str | None) -> None:
    genai_python()  # skip before building a checkpoint when there is no genai
    weights = _get(checkpoints, tmp_path_factory, kind, size)
    flags = ["--quantize", quantize] if quantize else []
    folder = _folder(SOURCES[kind], weights, tmp_path / "genai", *flags)
    prompts = [PROMPT, SHORT]
    ours = _ours(SOURCES[kind], weights, prompts, quantize)
    eos = _eos(folder)
    want = [_until_eos(t, eos) for t in ours]
    assert [_until_eos(t, eos) for t in genai_greedy(folder, [PROMPT], NEW)] == want[:1]
    assert [_until_eos(t, eos) for t in genai_greedy(folder, prompts, NEW)] == want  # padded on the right


def test_genai_runs_the_folder_with_contrib_ops(checkpoints: dict, tmp_path_factory: pytest.TempPathFactory,
                                                tmp_path: Path) -> None:
    """Heads of 8, which GroupQueryAttention does not rotate: the masked ONNX Attention step."""
    genai_python()
    weights = _get(checkpoints, tmp_path_factory, "llama", "tiny")
    folder = _folder(SOURCES["llama"], weights, tmp_path / "genai", "--contrib-ops")
    assert "position_ids" in json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]["inputs"]
    want = _ours(SOURCES["llama"], weights, [PROMPT, SHORT])
    assert genai_greedy(folder, [PROMPT, SHORT], NEW) == want


# Heads of 16 (the kernel's rotation takes multiples of 16) at the tiny size; Mistral with its window of 5, which
# the compact cache keeps padding out of, so that a padded row is exact while the window hides keys.
HEADS16 = {"hidden_size": 64, "head_dim": 16}
GQA_CASES = [("llama", "tiny", None), ("qwen2", "tiny", None), ("mistral", "tiny", None), ("llama", "tiny", "int4"),
             ("llama", "smollm2", None), ("qwen2", "smollm2", None), ("llama", "smollm2", "int4")]


@pytest.mark.parametrize(("kind", "size", "quantize"), GQA_CASES, ids=lambda v: str(v))
def test_genai_runs_the_group_query_attention_folder(tmp_path: Path, kind: str, size: str,
                                                     quantize: str | None) -> None:
    """--contrib-ops on the Llama family: GroupQueryAttention whose lengths come from attention_mask (as
    genai's builder writes it, no position_ids); genai's tokens are ours, alone and in a padded batch."""
    genai_python()
    weights = tmp_path / "checkpoint"
    hf_model(kind, seed=7, **(HEADS16 if size == "tiny" else SMOL)).save_pretrained(weights)
    flags = ["--contrib-ops", *(["--quantize", quantize] if quantize else [])]
    folder = _folder(SOURCES[kind], weights, tmp_path / "genai", *flags)
    decoder = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
    assert "position_ids" not in decoder["inputs"]
    eos = _eos(folder)
    want = [_until_eos(t, eos) for t in _ours(SOURCES[kind], weights, [PROMPT, SHORT], quantize)]
    assert [_until_eos(t, eos) for t in genai_greedy(folder, [PROMPT], NEW)] == want[:1]
    assert [_until_eos(t, eos) for t in genai_greedy(folder, [PROMPT, SHORT], NEW)] == want
    assert [_until_eos(t, eos) for t in genai_greedy(folder, [SHORT, PROMPT], NEW)] == want[::-1]


CHAT = "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"


def test_genai_reads_the_checkpoints_tokenizer_and_chat_template(checkpoints: dict,
                                                                 tmp_path_factory: pytest.TempPathFactory,
                                                                 tmp_path: Path) -> None:
    """The checkpoint's tokenizer.json and tokenizer_config.json (its chat template) go into the folder, and
    genai's Tokenizer encodes as the checkpoint's own tokenizer does and applies the template."""
    genai_python()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    weights = tmp_path / "checkpoint"
    hf_model("llama", seed=7, vocab_size=320).save_pretrained(weights)  # room for the tokenizer's 300 ids
    # a byte-level BPE as GPT-2's and SmolLM2's are, learnt here from a few lines (nothing is downloaded)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(["Once upon a time there was a compiler", "the paper writes every algorithm"] * 20,
                            trainer)
    hf_tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", chat_template=CHAT)
    hf_tokenizer.save_pretrained(weights)
    folder = _folder(SOURCES["llama"], weights, tmp_path / "smollm2-genai")  # the name docs/generation.md uses
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if (weights / name).exists():
            assert (folder / name).read_bytes() == (weights / name).read_bytes()
    text = "once upon a time the compiler writes"
    messages = [{"role": "user", "content": "once upon a time"}]
    got = ask_genai({"folder": str(folder), "text": text, "chat": messages})
    assert got["ids"] == hf_tokenizer(text)["input_ids"]
    assert got["chat"] == hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # docs/generation.md's example of genai's Python API runs on the folder, in genai's environment
    page = (ROOT / "docs" / "generation.md").read_text(encoding="utf-8")
    example = re.search(r"^```py\n(import onnxruntime_genai.*?)^```", page, re.S | re.M)
    assert example is not None
    done = subprocess.run([genai_python(), "-c", example.group(1)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.startswith("Once upon a time")  # the prompt, decoded back, then what was generated


@pytest.mark.parametrize("kind", list(SOURCES))
def test_the_folder_graph_on_our_onnxruntime(checkpoints: dict, tmp_path_factory: pytest.TempPathFactory,
                                            tmp_path: Path, kind: str) -> None:
    """Without genai: the folder's config names the graph's inputs and outputs, and its graph, fed a
    right-padded batch as genai feeds it (attention_mask, position_ids, an empty cache, then one step),
    gives each row the logits of running that row alone."""
    import onnxruntime as ort

    weights = _get(checkpoints, tmp_path_factory, kind, "tiny")
    folder = _folder(SOURCES[kind], weights, tmp_path / "genai")
    config = json.loads((folder / "genai_config.json").read_text())
    dec = config["model"]["decoder"]
    session = ort.InferenceSession(str(folder / dec["filename"]), providers=["CPUExecutionProvider"])
    layers, kv, head = dec["num_hidden_layers"], dec["num_key_value_heads"], dec["head_size"]
    past_names = [dec["inputs"][f"past_{w}_names"] % i for i in range(layers) for w in ("key", "value")]
    present_names = [dec["outputs"][f"present_{w}_names"] % i for i in range(layers) for w in ("key", "value")]
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", "position_ids", *past_names]
    assert [o.name for o in session.get_outputs()] == ["logits", *present_names]
    assert config["search"]["past_present_share_buffer"] is False and config["model"]["type"] == "decoder"

    def run(ids: np.ndarray, mask: np.ndarray, pos: np.ndarray, past: list[np.ndarray]) -> list[np.ndarray]:
        feed = {"input_ids": ids, "attention_mask": mask, "position_ids": pos,
                **dict(zip(past_names, past, strict=True))}
        return session.run(None, feed)

    def generate(prompts: list[list[int]], nxt: np.ndarray) -> list[np.ndarray]:
        """Prefill (right-padded) and two steps, as genai runs them: the last real token's logits per step."""
        width = max(map(len, prompts))
        ids = np.array([p + [0] * (width - len(p)) for p in prompts], dtype=np.int64)
        mask = np.array([[1] * len(p) + [0] * (width - len(p)) for p in prompts], dtype=np.int64)
        pos = np.where(mask == 1, np.arange(width), 0)
        past = [np.zeros((len(prompts), kv, 0, head), np.float32)] * (2 * layers)
        logits, *past = run(ids, mask, pos, past)
        last = np.array([len(p) - 1 for p in prompts])
        scores = [logits[np.arange(len(prompts)), last]]
        for _ in range(2):
            mask = np.concatenate([mask, np.ones((len(prompts), 1), np.int64)], axis=1)
            last = last + 1
            logits, *past = run(nxt, mask, last[:, None], past)
            scores.append(logits[:, -1])
        return scores

    step_tokens = np.array([[11], [13]])
    both = generate([PROMPT, SHORT], step_tokens)
    for row, prompt in enumerate([PROMPT, SHORT]):
        alone = generate([prompt], step_tokens[row:row + 1])
        for a, b in zip(both, alone, strict=True):
            np.testing.assert_allclose(a[row], b[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("args", "message"), [
    (["models/llama.alg", "--backend", "tvm"], "--backend tvm: an onnxruntime-genai folder is an ONNX decoder"),
    (["models/llama.alg", "--functions"], "--functions: an onnxruntime-genai folder"),
    (["models/llama.alg", "--padding-mask"], "--padding-mask: an onnxruntime-genai folder"),
    (["models/bert.alg", "-D", "L=1"], "no key/value cache can reproduce this"),
])
def test_what_a_genai_folder_cannot_hold_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                   args: list[str], message: str) -> None:
    assert main(["compile", *args, "--genai-folder", str(tmp_path / "out")]) == 1
    assert message in capsys.readouterr().err
    assert not any((tmp_path / "out").glob("*"))


def test_the_folder_is_a_folder_and_not_the_checkpoint(checkpoints: dict, tmp_path_factory: pytest.TempPathFactory,
                                                       tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "file").write_text("x")
    assert main(["compile", "models/llama.alg", "--genai-folder", str(tmp_path / "file")]) == 1
    assert "is a file; give a folder" in capsys.readouterr().err
    assert main(["compile", "models/llama.alg", "--genai-folder", str(tmp_path / "no" / "such")]) == 1
    assert "no directory" in capsys.readouterr().err
    weights = tmp_path / "checkpoint"
    hf_model("llama", seed=7).save_pretrained(weights)
    assert main(["compile", "models/llama.alg", "--weights", str(weights), "--genai-folder", str(weights)]) == 1
    assert "which this command reads" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ended:  # argparse's own refusal: one line, exit 1
        main(["compile", "models/llama.alg", "-o", str(tmp_path / "m.onnx"), "--genai-folder", str(tmp_path)])
    assert ended.value.code == 1 and "not allowed with argument" in capsys.readouterr().err
