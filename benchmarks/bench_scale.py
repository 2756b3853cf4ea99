#!/usr/bin/env python
"""The size ladder: compile and generate at real model shapes, from 135M to 7B parameters.

Per rung (benchmarks/common/checkpoints.py's SHAPES) it writes a random bf16 HF checkpoint tensor by tensor
(never a model in memory), then measures, each in a process of its own (peak RSS from wait4):

  compile fp32   `pseudoformer compile` to fp32 (where the disk has room): seconds, peak RSS, file bytes
  compile int4   the same with --quantize int4 (the output projection and a tied embedding quantized too)
Every measurement, the checkpoint writer and the bandwidth probe run in processes of their own, and this one
imports no numpy: Linux carries a parent's peak RSS into a child's (the forked image's high-water mark
survives exec), so a parent that had held a 512 MB probe reported every child at 3.3 GB.

  generate int4  16 new tokens after an 8-token prompt, greedy: load seconds (checkpoint to a session),
                 peak RSS, per-token seconds against the bandwidth floor (the int4 file's bytes read once
                 per token, at the bandwidth this machine streams memory at)

`--layers 12,24,48` adds compile times of SmolLM2-135M's shape at those layer counts (fp32: the passes and
the writer; quantization's time is per weight, linear by construction): the compile must grow linearly in
the layers. `--genai` also runs onnxruntime-genai's model builder
(`-p fp32`, `-p int4`) on each rung in its own virtual environment ($PSEUDOFORMER_GENAI_PYTHON, else
benchmarks/.genai-venv/bin/python); the builder loads the checkpoint with transformers. `--method rtn`
quantizes by rounding to nearest (one pass; the balanced default takes ~20).

    python benchmarks/bench_scale.py --rungs SmolLM2-135M,Qwen2.5-0.5B --layers 12,24,48
    python benchmarks/bench_scale.py --rungs Mistral-7B --no-fp32 --max-rss-gb 20

A rung is skipped, and the table says why, when the disk cannot hold its files or its predicted
footprint passes --max-rss-gb (the machine is shared: other work needs memory too).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common.checkpoints import SHAPES, parameter_count  # noqa: E402
from common.harness import machine_summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ALG = {"llama": "llama.alg", "qwen2": "qwen2.alg", "mistral": "mistral.alg"}
GIB = 1 << 30

_GENERATE = """
import json, resource, sys, time
import numpy as np
from pseudoformer.generation.api import prepare, run_plan
from pseudoformer.quantization import options
alg, ckpt, new, method = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
start = time.perf_counter()
p = prepare(alg, weights=ckpt, quantize=options("int4", method=method))
load = time.perf_counter() - start
loaded_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # the peak up to a ready session
result, _ = run_plan(p, prompt_ids=list(range(1, 9)), max_new_tokens=new, temperature=0.0)
print(json.dumps({"load_s": load, "load_rss": loaded_rss, "prefill_s": result.prefill_seconds,
                  "step_s": float(np.median(result.step_seconds)),
                  "file_bytes": sum(f.stat().st_size for f in p.generator.runtime.files.directory.iterdir())}))
"""


def run(cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None,
        ) -> tuple[float, int, str]:
    """Run `cmd`; its wall seconds, its peak RSS in bytes (this child alone, from wait4) and its stdout."""
    start = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                env=None if env is None else {**os.environ, **env}, cwd=cwd)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}); see {log}")
    return seconds, usage.ru_maxrss * 1024, out


def files_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + ".data")) if p.exists())


def compile_rung(alg: Path, ckpt: Path, out: Path, quantize: bool, log: Path, method: str = "balanced",
                 ) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pseudoformer.cli", "compile", str(alg), "--weights", str(ckpt), "-o", str(out)]
    if quantize:
        cmd += ["--quantize", "int4", "--quantize-method", method]
    seconds, rss, _ = run(cmd, log)
    size = files_bytes(out)
    for p in (out, out.with_name(out.name + ".data")):
        p.unlink(missing_ok=True)
    return {"s": seconds, "rss": rss, "bytes": size}


def generate_rung(alg: Path, ckpt: Path, new: int, log: Path, method: str = "balanced") -> dict[str, Any]:
    seconds, rss, out = run([sys.executable, "-c", _GENERATE, str(alg), str(ckpt), str(new), method], log)
    return {"s": seconds, "rss": rss, **json.loads(out.strip().splitlines()[-1])}


# onnxruntime-genai lives in a virtual environment of its own (onnxruntime-genai, torch, transformers, onnx,
# onnxscript, onnx_ir): its python is $PSEUDOFORMER_GENAI_PYTHON, else benchmarks/.genai-venv/bin/python.
GENAI_PYTHON = Path(os.environ.get("PSEUDOFORMER_GENAI_PYTHON", ROOT / "benchmarks" / ".genai-venv" / "bin" / "python"))


def genai_builder() -> Path | None:
    """genai's python when it has the model builder, or None."""
    if not GENAI_PYTHON.exists():
        return None
    found = subprocess.run([str(GENAI_PYTHON), "-c", "import onnxruntime_genai.models.builder, onnx_ir"],
                           capture_output=True, text=True)
    return GENAI_PYTHON if found.returncode == 0 else None


def genai_rung(python: Path, ckpt: Path, out: Path, precision: str, log: Path) -> dict[str, Any]:
    """The builder, in genai's own environment, from the same checkpoint."""
    if not (ckpt / "tokenizer.json").exists():  # the builder insists on a tokenizer
        code = (f"import sys; from pathlib import Path; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                f"from common.checkpoints import write_tokenizer; write_tokenizer(Path({str(ckpt)!r}))")
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    cmd = [str(python), "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out), "-p", precision,
           "-e", "cpu", "-c", str(out / "cache")]
    seconds, rss, _ = run(cmd, log, cwd=out.parent)
    size = sum(p.stat().st_size for p in out.glob("*.onnx*"))
    shutil.rmtree(out)
    return {"s": seconds, "rss": rss, "bytes": size}


def bandwidth() -> float:
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); from common.decoding import read_bandwidth; " \
           f"print(read_bandwidth({os.cpu_count() or 1}))"
    return float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)


def write_checkpoint(directory: Path, rung: str, layers: int | None = None) -> None:
    cmd = [sys.executable, str(Path(__file__).parent / "scale_checkpoints.py"), rung, str(directory)]
    subprocess.run(cmd + ([str(layers)] if layers else []), check=True, capture_output=True)


def gb(n: float) -> str:
    return f"{n / 1e9:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rungs", default="SmolLM2-135M,Qwen2.5-0.5B", help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/pseudoformer-scale"), help="checkpoints and outputs")
    ap.add_argument("--no-fp32", action="store_true", help="skip the fp32 compiles")
    ap.add_argument("--new", type=int, default=16, help="tokens generated")
    ap.add_argument("--layers", default="", help="e.g. 12,24,48: compile time against layer count")
    ap.add_argument("--max-rss-gb", type=float, default=12.0, help="skip what is predicted to need more")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoints written")
    ap.add_argument("--method", default="balanced", help="int4 quantization method (balanced, rtn)")
    ap.add_argument("--genai", action="store_true", help="also onnxruntime-genai's builder, -p int4 (and fp32)")
    args = ap.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    builder = genai_builder() if args.genai else None
    if args.genai and builder is None:
        print(f"# no onnxruntime-genai builder at {GENAI_PYTHON}: set PSEUDOFORMER_GENAI_PYTHON", flush=True)
    rows: list[str] = []
    genai_rows: list[str] = []
    floor_rate = bandwidth()
    print(f"# {machine_summary()}", flush=True)
    print(f"# memory bandwidth {floor_rate / 1e9:.1f} GB/s; load {os.getloadavg()[0]:.1f}", flush=True)
    for rung in [r for r in args.rungs.split(",") if r]:
        config = SHAPES[rung]
        n = parameter_count(config)
        ckpt = args.dir / rung
        alg = ROOT / "models" / ALG[config["model_type"]]
        free = shutil.disk_usage(args.dir).free
        if not (ckpt / "model.safetensors").exists():
            if 2 * n + 4 * n // 7 > free:
                rows.append(f"| {rung} | {n / 1e9:.2f} | skipped: {gb(free)} GB free on disk |")
                continue
            start = time.perf_counter()
            write_checkpoint(ckpt, rung)
            print(f"# {rung}: checkpoint {gb(2 * n)} GB written in {time.perf_counter() - start:.0f} s", flush=True)
        cells = [rung, f"{n / 1e9:.2f}"]
        free = shutil.disk_usage(args.dir).free
        if args.no_fp32 or 4 * n > free or 4 * n / GIB > args.max_rss_gb:
            cells += ["–"] * 3
        else:
            r = compile_rung(alg, ckpt, args.dir / f"{rung}.fp32.onnx", False, args.dir / f"{rung}.fp32.log")
            cells += [f"{r['s']:.0f}", gb(r["rss"]), gb(r["bytes"])]
            print(f"# {rung} fp32 compile {r}", flush=True)
        r = compile_rung(alg, ckpt, args.dir / f"{rung}.int4.onnx", True, args.dir / f"{rung}.int4.log",
                         args.method)
        cells += [f"{r['s']:.0f}", gb(r["rss"]), gb(r["bytes"])]
        print(f"# {rung} int4 compile {r}", flush=True)
        g = generate_rung(alg, ckpt, args.new, args.dir / f"{rung}.generate.log", args.method)
        floor = g["file_bytes"] / floor_rate
        cells += [f"{g['load_s']:.0f}", gb(g["rss"]), f"{1e3 * g['step_s']:.0f}", f"{1e3 * floor:.0f}",
                  f"{g['rss'] / g['file_bytes']:.2f}"]
        print(f"# {rung} int4 generate {g}", flush=True)
        rows.append("| " + " | ".join(cells) + " |")
        if builder is not None:
            cells = [rung]
            for precision in ("fp32", "int4"):
                if precision == "fp32" and (args.no_fp32 or 4 * n > shutil.disk_usage(args.dir).free):
                    cells += ["–"] * 3
                    continue
                r = genai_rung(builder, ckpt, args.dir / f"{rung}.genai-{precision}", precision,
                               args.dir / f"{rung}.genai-{precision}.log")
                cells += [f"{r['s']:.0f}", gb(r["rss"]), gb(r["bytes"])]
                print(f"# {rung} genai {precision} build {r}", flush=True)
            genai_rows.append("| " + " | ".join(cells) + " |")
        if not args.keep:
            shutil.rmtree(ckpt)
    print("| rung | params (B) | fp32 compile s | fp32 RSS GB | fp32 file GB | int4 compile s | int4 RSS GB | "
          "int4 file GB | generate load s | generate RSS GB | ms/token | floor ms/token | RSS / weights |")
    print("|" + "---|" * 13)
    print("\n".join(rows))
    if genai_rows:
        print("\n| rung | genai fp32 s | genai fp32 RSS GB | genai fp32 GB | genai int4 s | genai int4 RSS GB | "
              "genai int4 GB |\n|---|---|---|---|---|---|---|")
        print("\n".join(genai_rows))
    if args.layers:
        print("\n| layers | fp32 compile s | fp32 RSS GB |\n|---|---|---|")
        for layers in [int(x) for x in args.layers.split(",")]:
            ckpt = args.dir / f"SmolLM2-L{layers}"
            write_checkpoint(ckpt, "SmolLM2-135M", layers)
            r = compile_rung(ROOT / "models" / "llama.alg", ckpt, args.dir / f"L{layers}.onnx", False,
                             args.dir / f"L{layers}.log")
            print(f"| {layers} | {r['s']:.1f} | {gb(r['rss'])} |", flush=True)
            shutil.rmtree(ckpt)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
