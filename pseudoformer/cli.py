"""The `pseudoformer` command: check, inspect, run, compile, generate, train.

Every user mistake ends as one message on stderr (file:line:col, the line and a caret where the
source is at fault) and exit code 1; a traceback means a bug in pseudoformer.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pseudoformer.base import limits
from pseudoformer.base.atomic_write import check_output, full_disk, write_atomic
from pseudoformer.base.errors import AlgError, CompileError, ContribFallbackWarning, UsageError
from pseudoformer.base.file_access import load_npy
from pseudoformer.base.limits import MAX_NODES
from pseudoformer.base.terminal import escape, escape_lines
from pseudoformer.cli_parser import build_parser
from pseudoformer.outputs import check_outputs
from pseudoformer.run_settings import check_seed

if TYPE_CHECKING:  # numpy is imported where it is used: `pseudoformer --version` needs none of it
    import numpy as np


def main(argv: list[str] | None = None) -> int:
    """Run one command; every way it can end goes through here.

    A user's mistake (AlgError, CompileError, an OSError naming a path) is one message and exit 1.
    Anything else that escapes a command — a bug in pseudoformer, or a foreign library failing in a
    way it should not (a Rust panic from tokenizers is a pyo3 PanicException, which derives from
    BaseException, not Exception) — is an "internal error" with a bug-report hint and exit 2.
    Every line printed passes through terminal.escape_lines, so no input text reaches the terminal raw.
    """
    if argv is not None and any("\x00" in a for a in argv):  # a shell cannot pass one; a caller of main() can
        _say("error: an argument holds a NUL byte, which no path or value may hold")
        return 1
    # Past `ulimit -f` the kernel sends SIGXFSZ, whose default ends the process with a core and no word, leaving
    # temporary files behind; ignored, the write fails with EFBIG, which is said as a full disk and cleaned up.
    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = {"check": _check, "inspect": _inspect, "run": _run,
                                                        "compile": _compile, "generate": _generate,
                                                        "train": _train}[args.command]
    default_seq_len = limits.MAX_SEQ_LEN
    try:
        if getattr(args, "max_seq_len", None) is not None:
            if args.max_seq_len < 1:
                raise UsageError(f"--max-seq-len must be at least 1, got {args.max_seq_len}")
            limits.MAX_SEQ_LEN = args.max_seq_len
        check_outputs(args)  # before any work: an output that cannot be written, or that is an input
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ContribFallbackWarning)
                return handler(args)
        finally:
            _say_warnings(caught)  # after the recording ends: shown while recording, each would be recorded again
    except (CompileError, AlgError) as e:
        _say(e.render())
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    except MemoryError:  # an allocation the machine (or a ulimit) refused: the input's size, not a bug
        _say("error: out of memory: this command needs more memory than the process may have (a smaller model, "
             "batch or sequence, or more memory, or a higher ulimit -v)")
    except OSError as e:
        if full_disk(e):  # a write outside the atomic writers (a library's own file): still the user's disk
            where = f" {escape(str(e.filename))}" if e.filename is not None else ""
            _say(f"error: cannot write{where}: no space left on device")
            return 1
        if e.filename is None:
            return _internal(e)
        # A path the user gave that the system refuses to look at (a name too long, a loop of links).
        _say(f"error: cannot use {escape(str(e.filename))}: {escape(str(e.strerror or e))}")
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # noqa: BLE001 (a bug, or a library's panic: never a traceback)
        return _internal(e)
    finally:
        limits.MAX_SEQ_LEN = default_seq_len  # one command's --max-seq-len is not the next's (main() in-process)
    return 1


def _say_warnings(caught: list[warnings.WarningMessage]) -> None:
    """The warnings a command raised, each distinct one once: ours (ContribFallbackWarning) as a note, any other
    as a warning line. A library may warn once per tensor or per step; the user needs each kind once."""
    seen: set[tuple[type, str]] = set()
    for w in caught:
        key = (w.category, str(w.message))
        if key in seen:
            continue
        seen.add(key)
        kind = "note" if issubclass(w.category, ContribFallbackWarning) else f"warning ({w.category.__name__})"
        _say(f"{kind}: {escape(str(w.message))}")


def _say(text: str) -> None:
    """Print a message on stderr, each of its lines escaped for the terminal (terminal.py). Its parts from
    input are escaped already (AlgError.render, escape), newlines included: the lines left are ours."""
    print(escape_lines(text), file=sys.stderr)


def _internal(e: BaseException) -> int:
    if os.environ.get("PSEUDOFORMER_DEBUG"):
        raise e
    _say(f"pseudoformer: internal error: {type(e).__name__}: {escape(str(e)[:2000])}")
    _say("  this is a bug in pseudoformer: please report it with the command that caused it and the traceback "
         "that PSEUDOFORMER_DEBUG=1 shows")
    return 2


def _train(args: argparse.Namespace) -> int:
    from pseudoformer.training.cli import run as run_train

    return run_train(args)


def _generate(args: argparse.Namespace) -> int:
    from pseudoformer.generation.cli import run

    return run(args)


def _check(args: argparse.Namespace) -> int:
    from pseudoformer.model import check_report

    errors: list[AlgError] = []
    for f in args.files:
        try:
            report = check_report(f, entry=args.entry, config=args.config, defines=args.defines,
                                  include=args.include, max_nodes=args.max_nodes)
            # One line per file: an inference algorithm's plan follows its file's `ok`.
            plans = f" — {'; '.join(report.summaries)}" if report.summaries else ""
            print(escape(f"{f}: ok ({', '.join(report.checked)}){plans}"))
        except CompileError as e:
            errors.extend(e.errors)
    if errors:
        raise CompileError(errors)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from pseudoformer.ir.printer import format_graph
    from pseudoformer.ir.view import to_dot, to_json
    from pseudoformer.model import load
    from pseudoformer.optimize import after_pass, describe_passes, diff_pass, optimize, rule_counts

    compile_options, backend = _inspect_compile_options(args)
    if args.passes:
        print(describe_passes(compile_options, backend))
        return 0
    if args.file is None:
        raise UsageError("inspect needs a FILE (or --passes)")
    opt = args.opt if args.opt is not None else 0
    if compile_options is not None and backend != "onnx":
        raise UsageError("inspect follows the onnx backend's compile pipeline (--passes lists tvm's)")
    # The graph alone unless a pass computes with the weights (quantize): inspect shows none, so
    # none are drawn (model.load, bind_weights).
    needs_weights = compile_options is not None and getattr(compile_options, "quantize", None) is not None
    model = load(args.file, entry=args.entry, config=args.config, defines=args.defines, include=args.include,
                 max_nodes=args.max_nodes, bind_weights=needs_weights)
    given = {"compile_options": compile_options, "weights": model.weights}
    if args.refusals:
        notes, fired = rule_counts(model.graph, max(opt, 2), **given)
        total = sum(getattr(n, "count", 1) for n in notes)  # each refused head, not each line
        counts = ", ".join(f"{rule} {n}" for rule, n in sorted(fired.items())) or "none"
        text = "\n".join([n.render() for n in notes] + [f"rules fired: {counts}", f"{total or 'no'} refused fusion"
                                                        f"{'' if total == 1 else 's'}"])
    elif args.diff:
        text = diff_pass(model.graph, args.diff, max(opt, 2), **given)
    elif args.format == "html":
        from pseudoformer.viewer import to_html

        text = to_html(model.graph, opt, after=args.after, **given)
    else:
        g = after_pass(model.graph, args.after, max(opt, 2), **given) if args.after else optimize(model.graph, opt)
        if args.format == "text":
            text = format_graph(g, with_locations=args.locations)
        elif args.format == "dot":
            text = to_dot(g)
        elif args.format == "svg":
            from pseudoformer.viewer import to_svg

            text = to_svg(g, f"-O{opt}" if not args.after else f"after {args.after}")
        else:
            text = json.dumps(to_json(g), indent=1, ensure_ascii=False)
    if args.output:
        write_atomic(Path(args.output), lambda fh: fh.write(text.encode("utf-8")))
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _inspect_compile_options(args: argparse.Namespace) -> tuple[Any, str]:
    """The CompileOptions inspect's compile flags ask for (None where none is given), and the backend."""
    from pseudoformer.compile_options import from_arguments

    options = from_arguments(args)
    given = (args.backend, args.dtype, args.opset, options.quantize, args.padding_mask or None,
             args.functions or None, args.contrib_ops or None)
    if all(v is None for v in given) and not (args.passes and args.opt is not None):
        return None, options.backend
    return options, options.backend


def _read_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    out = {}
    for spec in specs:
        if "=" not in spec:
            raise UsageError(f"--input takes NAME=FILE.npy or NAME=[…], got {spec!r}")
        name, file = spec.split("=", 1)
        if file.lstrip().startswith("["):
            out[name] = _json_array(name, file)
            continue
        out[name] = load_npy(file, f"--input {name} file")  # never unpickled: inputs are untrusted
    return out


def _json_array(name: str, text: str) -> np.ndarray:
    """An inline --input, JSON (never eval'ed): a list of numbers, nested as deep as the array's rank."""
    import numpy as np

    try:
        value = json.loads(text)
    except (json.JSONDecodeError, ValueError) as e:
        raise UsageError(f"--input {name}: not a JSON list of numbers ({e})") from None
    except RecursionError:
        raise UsageError(f"--input {name}: the JSON list is nested too deeply for an array") from None
    try:
        array = np.array(value)
    except (ValueError, OverflowError, RecursionError) as e:  # ragged lists, lists thousands deep
        raise UsageError(f"--input {name}: not a JSON list of numbers ({e})") from None
    if array.dtype == object:  # mixed types, or integers past 64 bits
        raise UsageError(f"--input {name}: not a list of numbers that fit an array (integers must fit in 64 bits)")
    return array


def _compile(args: argparse.Namespace) -> int:
    from pseudoformer.compile_options import from_arguments
    from pseudoformer.deploy import compile_loaded, streams_weights
    from pseudoformer.model import load

    options = from_arguments(args)  # --genai-folder's rules too, before any work
    if options.backend == "torch":
        raise UsageError('--backend torch makes a torch.nn.Module in Python, no file: pseudoformer.compile(FILE, '
                         'backend="torch") (docs/api.md); `pseudoformer train --backend torch` trains with it')
    if args.genai_folder is not None:
        from pseudoformer.cli_genai import compile_folder

        return compile_folder(args, options, _say)
    if options.provider != "cpu":
        raise UsageError(f"--provider {options.provider} is for --genai-folder (a genai config names its provider); "
                         "a compiled .onnx file runs on either: run it with --provider")
    out = Path(args.output)
    check_output(out)  # before compiling: a path that cannot be written should not cost a compile
    model = load(args.file, entry=args.entry, config=args.config, defines=args.defines, weights=args.weights,
                 seed=args.seed, include=args.include, max_nodes=args.max_nodes,
                 allow_nonfinite=args.allow_nonfinite, lazy_weights=streams_weights(options))
    compiled = compile_loaded(model, options)
    compiled.save(out)
    n = sum(w.size for w in compiled.model.weights.values())
    inputs = [str(i.attrs['name']) + str(list(i.type.shape)) for i in compiled.model.graph.inputs]
    if args.padding_mask:
        from pseudoformer.passes.padding_mask import padding_mask_inputs

        inputs += padding_mask_inputs(compiled.model.graph)
    where = ""
    if options.backend == "tvm":
        from pseudoformer.backends.tvm.build import weights_path

        bound = compiled.compiled.meta["param_mode"] == "bind"
        where = " (weights bound into the library)" if bound else f" (weights in {weights_path(out)})"
    quantized = getattr(compiled, "quantize", None)
    kind = options.dtype if quantized is None else f"{options.dtype}, weights {quantized.describe()}"
    _say(f"wrote {escape(str(out))}: {compiled.model.entry}, {n:,} parameters, {kind}, inputs {', '.join(inputs)}{escape(where)}")
    return 0


def _refuse_source_options(args: argparse.Namespace) -> None:
    """A compiled model holds its weights and sizes: options that build a model from a .alg would be ignored."""
    given = [flag for flag, on in (
        ("--weights", args.weights is not None), ("--seed", args.seed is not None), ("-D", bool(args.defines)),
        ("--config", args.config is not None), ("--entry", args.entry is not None), ("--include", bool(args.include)),
        ("--max-nodes", args.max_nodes != MAX_NODES), ("--allow-nonfinite", args.allow_nonfinite),
        ("-O", args.opt is not None)) if on]
    if given:
        raise UsageError(f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} for a .alg file; "
                         f"{Path(args.file).name} is compiled, with its weights and sizes inside: pass them to "
                         "`pseudoformer compile` and run the new file, or run the .alg source with them")


def _run(args: argparse.Namespace) -> int:
    from pseudoformer.compile_options import from_arguments
    from pseudoformer.model import check_inputs, load

    is_onnx = Path(args.file).suffix == ".onnx"
    is_so = Path(args.file).suffix == ".so"
    if is_onnx or is_so:
        _refuse_source_options(args)
    args.seed = 0 if args.seed is None else args.seed
    check_seed(args.seed)
    options = from_arguments(args).runnable("run")
    backend = options.backend
    inputs = _read_inputs(args.inputs)
    if args.max_memory is not None and not (is_onnx and args.max_memory >= 1):
        raise UsageError("--max-memory BYTES (at least 1) is for running a .onnx file")
    if is_so:
        from pseudoformer.deploy_tvm import run_library

        if backend != "tvm":
            raise UsageError("a .so file runs on the tvm backend; run the .alg source for numpy or onnx")
        outputs = run_library(args.file, inputs)
    elif is_onnx:
        from pseudoformer.deploy import run_onnx

        if backend != "onnx":
            raise UsageError("a .onnx file runs on the onnx backend; run the .alg source for numpy")
        outputs = run_onnx(args.file, inputs, provider=options.provider, threads=options.threads,
                           max_memory=args.max_memory)
    else:
        model = load(args.file, entry=args.entry, config=args.config, defines=args.defines, weights=args.weights,
                     seed=args.seed, include=args.include, max_nodes=args.max_nodes,
                     allow_nonfinite=args.allow_nonfinite)
        feed = check_inputs(model.graph, inputs)
        if backend == "tvm":
            from pseudoformer.deploy_tvm import compile_model

            outputs = compile_model(model, options).run(feed)
        elif backend == "onnx":
            from pseudoformer.deploy import lower, run_onnx

            outputs = run_onnx(lower(model, options), feed, provider=options.provider, threads=options.threads)
        else:
            from pseudoformer.ir.interpreter import InterpreterError, run
            from pseudoformer.optimize import optimize

            try:
                outputs = run(optimize(model.graph, options.opt_level), feed, model.weights)
            except InterpreterError as e:
                # The interpreter wraps numpy's IndexError (a token id past the vocabulary): the
                # user's input is at fault, not pseudoformer, as the onnx backend reports it too.
                if isinstance(e.__cause__, IndexError):
                    raise UsageError(f"an input index is out of range: {e.__cause__}") from None
                raise
    import numpy as np

    undefined = [k for k, v in outputs.items() if np.issubdtype(np.asarray(v).dtype, np.floating) and np.isnan(v).any()]
    if undefined and not getattr(args, "allow_nonfinite", False):  # NaN is no answer, unless NaN weights were let in
        raise UsageError(f"the output {', '.join(undefined)} holds NaN: this model's weights or hyperparameters make "
                         "it undefined (an ε of 0 under a norm, values whose squares pass float32's range); nothing "
                         "was written")
    write_atomic(Path(args.output), lambda fh: np.savez(fh, **outputs))
    shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in outputs.items())
    _say(f"wrote {escape(args.output)}: {escape(shapes)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
