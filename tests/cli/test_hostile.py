"""Hostile command lines: each gets one clear message and exit code 1, reads nothing it should not,
and leaves nothing behind (issue 16's list, one row per item).

A scene in tmp_path holds what the rows point at: a FIFO, links to /dev/zero and /etc/passwd, a
.npy whose header lies, weights holding NaN, a checkpoint whose config is hostile. Outputs go to an
`out/` directory that must stay empty. Nothing here writes to a device: the one output row that
names a character device uses one made in tmp_path (when this user may make one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import pseudoformer
from pseudoformer.cli import main
from pseudoformer.weights import save_weights

MODELS = Path(__file__).resolve().parents[2] / "models"
GPT2, BART = str(MODELS / "gpt2.alg"), str(MODELS / "bart.alg")
SIZES = {"L": 1, "H": 2, "d_e": 8, "d_mlp": 16, "d_attn": 4, "d_mid": 4, "ell_max": 6, "N_V": 11, "eps": 1e-5}
SMALL = ["--config", os.devnull, *(a for k, v in SIZES.items() for a in ("-D", f"{k}={v}"))]
BART_SMALL = ["--config", os.devnull, *(a for k, v in {**SIZES, "L_enc": 1, "L_dec": 1, "ell_gen": 2, "tau": 1.0,
                                                          "eos_token": 2, "decoder_start_token": 2}.items()
                                        for a in ("-D", f"{k}={v}") if k != "L")]
BLOCK = "Algorithm: y ← F(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  1 return y = x\n"


class Scene:
    """The files the rows name, made once per test in tmp_path."""

    def __init__(self, root: Path) -> None:
        self.root, self.out = root, root / "out"
        self.out.mkdir()
        self.fifo = root / "pipe.alg"
        os.mkfifo(self.fifo)
        os.mkfifo(root / "pipe.npy")
        os.mkfifo(root / "pipe.safetensors")
        (root / "zero.alg").symlink_to("/dev/zero")
        (root / "passwd.alg").symlink_to("/etc/passwd")
        (root / "out-link").symlink_to(self.fifo)
        self.uses = {}
        for name, target in {"fifo": "pipe.alg", "device": "zero.alg", "proc": "/proc/self/environ",
                             "shadow": "../../../../../../../../etc/shadow"}.items():
            self.uses[name] = self.alg(f"use_{name}.alg", f'use "{target}"\n' + BLOCK)
        self.empty = self.alg("empty.alg", "")
        self.nested = self.alg("nested.alg", BLOCK.replace("= x\n", "= " + "−" * 400 + "x\n"))
        big = root / "big.alg"
        with open(big, "wb") as f:  # sparse: 2 MiB on paper, nothing on disk
            f.truncate(2 << 20)
        self.big = str(big)
        lying = root / "lying.npy"  # the header promises a million int64, the file holds one
        np.save(lying, np.array([1], dtype=np.int64))
        data = lying.read_bytes().replace(b"(1,)", b"(1000000,)")
        lying.write_bytes(data)
        self.lying = str(lying)
        self.hf = {}
        for name, config in {"layers": {"model_type": "gpt2", "n_layer": 10**9, "n_embd": 8, "n_head": 2,
                                        "vocab_size": 11, "n_positions": 6},
                             "type_list": {"model_type": ["gpt2"]}}.items():
            d = root / f"hf_{name}"
            d.mkdir()
            (d / "config.json").write_text(json.dumps(config), encoding="utf-8")
            self.hf[name] = str(d)
        d = root / "hf_fifo"
        d.mkdir()
        os.mkfifo(d / "config.json")
        self.hf["fifo"] = str(d)
        weights = dict(pseudoformer.load(GPT2, config=os.devnull, defines=SMALL[3::2]).weights)
        weights["W_e"] = weights["W_e"].copy()
        weights["W_e"][0, :2] = [np.nan, np.inf]
        self.nan_weights = str(root / "nan.safetensors")
        save_weights(weights, self.nan_weights)

    def alg(self, name: str, text: str) -> str:
        (self.root / name).write_text(text, encoding="utf-8")
        return str(self.root / name)

    def o(self, name: str = "y.npz") -> str:
        return str(self.out / name)


Row = tuple[Callable[[Scene], list[str]], str]
ROWS: dict[str, Row] = {
    # 1. file access
    "use /proc/self/environ": (lambda s: ["check", s.uses["proc"]], "`use` takes a .alg file"),
    "use ../../etc/shadow": (lambda s: ["check", s.uses["shadow"]], "`use` takes a .alg file"),
    "use a link to /dev/zero": (lambda s: ["check", s.uses["device"]], "leads outside the directories"),
    "use a FIFO": (lambda s: ["check", s.uses["fifo"]], "is a FIFO (named pipe), not a regular file"),
    "check /dev/zero": (lambda s: ["check", "/dev/zero"], "/dev/zero is not a .alg file"),
    "check a FIFO": (lambda s: ["check", str(s.fifo)], "is a FIFO (named pipe)"),
    "check a link to /etc/passwd": (lambda s: ["check", str(s.root / "passwd.alg")], "which is not a .alg file"),
    "check a 2 MiB source": (lambda s: ["check", s.big], "more than the 1.0 MiB a file may be"),
    "--config /dev/zero": (lambda s: ["check", GPT2, "--config", "/dev/zero"], "is a character device"),
    "--config FIFO": (lambda s: ["check", GPT2, "--config", str(s.fifo)], "is a FIFO"),
    "--weights FIFO": (lambda s: ["run", GPT2, *SMALL, "--weights", str(s.root / "pipe.safetensors"),
                                  "--input", "x=[[1]]", "-o", s.o()], "is a FIFO"),
    "--weights DIR with a FIFO config.json": (lambda s: ["run", GPT2, "--weights", s.hf["fifo"], "--input", "x=[[1]]",
                                                         "-o", s.o()], "is a FIFO"),
    "--input FIFO": (lambda s: ["run", GPT2, *SMALL, "--input", f"x={s.root / 'pipe.npy'}", "-o", s.o()], "is a FIFO"),
    "--input /dev/zero": (lambda s: ["run", GPT2, *SMALL, "--input", "x=/dev/zero", "-o", s.o()], "character device"),
    "check a name too long": (lambda s: ["check", "a" * 3000 + ".alg"], "File name too long"),
    "--include a name too long": (lambda s: ["check", GPT2, "--include", "a" * 3000], "File name too long"),
    "use a name too long": (lambda s: ["check", s.alg("long.alg", f'use "{"a" * 3000}.alg"\n' + BLOCK)],
                            "File name too long"),
    "--input .npy shorter than its header": (lambda s: ["run", GPT2, *SMALL, "--input", f"x={s.lying}", "-o", s.o()],
                                             "8,000,000 bytes, but the file holds"),
    # 2. output
    "-o a FIFO": (lambda s: ["compile", GPT2, *SMALL, "-o", str(s.fifo)], "pseudoformer replaces only regular files"),
    "-o a link to a FIFO": (lambda s: ["run", GPT2, *SMALL, "--input", "x=[[1]]", "-o", str(s.root / "out-link")],
                            "it is a FIFO"),
    "-o a directory": (lambda s: ["inspect", GPT2, *SMALL, "-o", str(s.out)], "it is a directory"),
    "-o a name too long": (lambda s: ["compile", GPT2, *SMALL, "-o", str(s.out / ("m" * 3000))], "File name too long"),
    # 3. resource bounds
    "-D L=1000000": (lambda s: ["check", GPT2, "-D", "L=1000000"], "this loop runs L = 1,000,000 times"),
    "-D d_e=100000000": (lambda s: ["compile", GPT2, "-D", "d_e=100000000", "-o", s.o("m.onnx")],
                         "of memory available"),
    "n_layer = 10⁹ in config.json": (lambda s: ["compile", GPT2, "--weights", s.hf["layers"], "-o", s.o("m.onnx")],
                                     "this loop runs L = 1,000,000,000 times"),
    "--max-nodes 100": (lambda s: ["check", GPT2, *SMALL, "--max-nodes", "100"], "--max-nodes N raises"),
    "--max-nodes 0": (lambda s: ["check", GPT2, *SMALL, "--max-nodes", "0"], "--max-nodes must be"),
    "-D L=-1": (lambda s: ["compile", GPT2, *SMALL, "-D", "L=-1", "-o", s.o("m.onnx")], "must be at least 1 (got -1)"),
    "-D d_e=0": (lambda s: ["compile", GPT2, *SMALL, "-D", "d_e=0", "-o", s.o("m.onnx")], "must be at least 1 (got 0)"),
    "-D N_V=0": (lambda s: ["compile", GPT2, *SMALL, "-D", "N_V=0", "-o", s.o("m.onnx")], "must be at least 1 (got 0)"),
    "-D eps=nan": (lambda s: ["check", GPT2, *SMALL, "-D", "eps=nan"], "must be a finite number"),
    "--threads 1000": (lambda s: ["run", GPT2, *SMALL, "--backend", "onnx", "--threads", "1000", "--input", "x=[[1]]",
                                  "-o", s.o()], "--threads must be between 1 and"),
    "--threads 100000": (lambda s: ["run", GPT2, *SMALL, "--backend", "onnx", "--threads", "100000",
                                    "--input", "x=[[1]]", "-o", s.o()], "--threads must be between 1 and"),
    "400 nested −": (lambda s: ["check", s.nested], "nested more than 100 levels deep"),
    # 4. values
    "run x=[[-5]]": (lambda s: ["run", GPT2, *SMALL, "--input", "x=[[-5]]", "-o", s.o()], "token id -5 in x"),
    "run x=[[-5]] on onnx": (lambda s: ["run", GPT2, *SMALL, "--backend", "onnx", "--input", "x=[[-5]]", "-o", s.o()],
                             "token id -5 in x"),
    "generate --temperature 1e-320": (lambda s: ["generate", GPT2, *SMALL, "-D", "ell_gen=2", "--prompt-ids", "1",
                                                 "--temperature", "1e-320"], "give 0 for greedy"),
    "--seed -1 (run)": (lambda s: ["run", GPT2, *SMALL, "--seed", "-1", "--input", "x=[[1]]", "-o", s.o()],
                        "seed must be a whole number ≥ 0"),
    "--seed -1 (generate)": (lambda s: ["generate", GPT2, *SMALL, "-D", "ell_gen=2", "--prompt-ids", "1",
                                        "--seed", "-1"], "seed must be a whole number ≥ 0"),
    "NaN and Inf weights": (lambda s: ["run", GPT2, *SMALL, "--weights", s.nan_weights, "--input", "x=[[1]]",
                                       "-o", s.o()], "W_e (1 NaN, 1 ±∞)"),
    # compile and generate read each tensor as the file is written (issue 25): refused there, nothing left
    "NaN and Inf weights (compile)": (lambda s: ["compile", GPT2, *SMALL, "--weights", s.nan_weights,
                                                 "-o", s.o("m.onnx")], "W_e (1 NaN, 1 ±∞)"),
    "NaN and Inf weights (generate)": (lambda s: ["generate", GPT2, *SMALL, "-D", "ell_gen=2", "--prompt-ids", "1",
                                                  "--weights", s.nan_weights], "W_e (1 NaN, 1 ±∞)"),
    "an empty .alg": (lambda s: ["check", s.empty], "defines no algorithm"),
    "generate --threads 0": (lambda s: ["generate", GPT2, *SMALL, "-D", "ell_gen=2", "--prompt-ids", "1",
                                        "--threads", "0"], "--threads must be between 1 and"),
    'model_type ["gpt2"]': (lambda s: ["compile", GPT2, "--weights", s.hf["type_list"], "-o", s.o("m.onnx")],
                            "model_type ['gpt2'] is not supported"),
    "prompt id 10³⁰": (lambda s: ["generate", GPT2, *SMALL, "-D", "ell_gen=2", "--prompt-ids", "1" + "0" * 30],
                       "below 2^63"),
    "BART encoder ids past ℓ_max": (lambda s: ["generate", BART, *BART_SMALL, "--backend", "numpy",
                                               "--encoder-ids", " ".join(["1"] * 9)], "the model takes at most 6"),
    "JSON nested 30,000 deep": (lambda s: ["run", GPT2, *SMALL, "--input", "x=" + "[" * 30000 + "]" * 30000,
                                           "-o", s.o()], "nested too deeply"),
    "JSON id 10³⁰": (lambda s: ["run", GPT2, *SMALL, "--input", f"x=[[{10**30}]]", "-o", s.o()], "fit in 64 bits"),
}


@pytest.fixture
def scene(tmp_path: Path) -> Scene:
    return Scene(tmp_path)


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusals
        code = e.code if isinstance(e.code, int) else 1
    return code, capsys.readouterr().err


@pytest.mark.parametrize("row", sorted(ROWS))
def test_hostile_command_gets_one_message_and_exit_1(row: str, scene: Scene,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    argv, fragment = ROWS[row]
    code, err = run_cli(argv(scene), capsys)
    assert code == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert err.count("error:") == 1, err
    assert fragment in err, err
    assert "root:" not in err and "HOME=" not in err, err  # nothing of /etc/passwd or the environment
    assert list(scene.out.iterdir()) == [], "a refused command left files behind"
    assert scene.fifo.is_fifo()  # an output path that is not a regular file is left as it was


def test_nonfinite_weights_load_when_allowed(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(["run", GPT2, *SMALL, "--weights", scene.nan_weights, "--allow-nonfinite",
                         "--input", "x=[[2]]", "-o", scene.o()], capsys)
    assert code == 0, err


@pytest.mark.parametrize("argv", [["compile", GPT2, *SMALL, "--backend", "tvm", "-o", "{out}/m.so"],
                                  ["run", GPT2, *SMALL, "--backend", "tvm", "--input", "x=[[1]]", "-o", "{out}/y.npz"],
                                  ["generate", GPT2, *SMALL, "-D", "ell_gen=2", "--prompt-ids", "1",
                                   "--backend", "tvm"]])
def test_tvm_backend_without_tvm_says_how_to_install_it(argv: list[str], tmp_path: Path) -> None:
    # A fresh interpreter where `import tvm` fails, as without the tvm extra.
    code = "import sys; sys.modules['tvm'] = None; from pseudoformer.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, *(a.format(out=tmp_path) for a in argv)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("error:") == 1 and "install pseudoformer[tvm]" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []
