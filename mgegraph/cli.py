"""The ``mgegraph`` command line (also ``python -m mgegraph``): one small function per
subcommand over the library's own calls.

    mgegraph demo                                   # train on digits, save digits_cnn.mgm
    mgegraph run digits_cnn.mgm --input input0=x.npy -o y.npz
    mgegraph report digits_cnn.mgm --json --dim batch=8
    mgegraph tune digits_cnn.mgm --dim batch=8       # measure its kernels' ways, store them
    mgegraph viz digits_cnn.mgm -o plan.html
    mgegraph profile digits_cnn.mgm --runs 20 --trace trace.json
    mgegraph convert model.onnx -o model.mgm
    mgegraph export-c digits_cnn.mgm -o out --dim batch=1   # C sources: make -C out
    mgegraph bench --json bench.json

An error is one line on stderr (``mgegraph: error: ...``) and exit status 1 (2 for a wrong
command line); ``--debug`` shows the traceback instead.

A model saved with a named dimension (``input0: float32[batch, 1, 8, 8]``) takes any
conforming input: ``run`` specialises for the files given; ``report``, ``viz`` and ``profile``
for the ``--input`` files and ``--dim NAME=N`` given, each name left at its least value
(``io.feeds``), and they print the binding they used.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path

import numpy as np

from . import __version__, runtime
from . import onnx as mg_onnx  # the package alone: it imports the onnx library when called
from .io import Predictor, read, save
from .io.arrays import type_text, write_npz
from .io.feeds import binding, feeds_and_binding, read_feeds
from .io.model_file import input_types, output_types
from .ir.errors import FeedError, GraphError, KernelError, ModelFormatError
from .symbolic_plan import SymbolicPlan
from .tuning import store_path

PROG = "mgegraph"
VIZ_FORMATS = (".html", ".svg", ".dot")
DEMO_OUTPUT = "digits_cnn.mgm"  # demo.DEFAULT_OUTPUT, for the help text (a test keeps them equal)
# errors that describe the user's input; anything else is reported with its type, as a bug
_EXPECTED = (GraphError, FeedError, KernelError, OSError, ImportError, ValueError)


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    >>> main(["report", "digits_cnn.mgm", "--json"])   # prints the JSON report, returns 0
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    head, bench_argv = _split_bench(argv)
    try:
        args = build_parser().parse_args(head)
    except SystemExit as exit:  # --help, --version and usage errors: argparse has printed
        return exit.code if isinstance(exit.code, int) else 1
    args.bench_argv = bench_argv
    return _dispatch(args)


def _split_bench(argv: list[str]) -> tuple[list[str], list[str]]:
    """``bench``'s arguments go to ``mgegraph.tools.bench.main`` untouched (its own parser);
    the global options before it (and a ``--debug`` anywhere) stay here."""
    for i, token in enumerate(argv):
        if not token.startswith("-"):
            if token != "bench":
                break
            rest = argv[i + 1:]
            debug = ["--debug"] if "--debug" in rest else []
            return argv[:i + 1] + debug, [a for a in rest if a != "--debug"]
    return argv, []


def _dispatch(args) -> int:
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `mgegraph report m.mgm | head`: the reader left; not an error
        _silence_stdout()
        return 0
    except Exception as exc:  # noqa: BLE001 (the one place every error becomes one line)
        if args.debug:
            traceback.print_exc()
        else:
            print(error_line(exc), file=sys.stderr)
        return 1


def error_line(exc: BaseException) -> str:
    """The one line an error prints: its message, with its type when it is not one that
    describes the user's input (a bug, then).

    >>> error_line(FeedError("no --input for input0"))   # 'mgegraph: error: no --input ...'
    """
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, _EXPECTED):
        text = f"{type(exc).__name__}: {text} (--debug shows the traceback)"
    return f"{PROG}: error: {text}"


def _silence_stdout() -> None:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


# -- the parser ----------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other error of the command."""

    def error(self, message):
        self.exit(2, f"{PROG}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: global options and one subparser per subcommand.

    >>> build_parser().parse_args(["report", "m.mgm"]).json   # False
    """
    parser = _Parser(prog=PROG, description="mgegraph: train, run, inspect, profile and "
                     "convert models from the command line.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error instead of one line")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in (_add_demo, _add_run, _add_report, _add_tune, _add_viz, _add_profile,
                _add_convert, _add_bench, _add_export_c):
        command = add(sub)
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show the full traceback of an error instead of one line")
    _add_launch(sub)
    return parser


def _add_demo(sub):
    p = sub.add_parser("demo", help="train an MLP and a CNN on the digits, save the CNN",
                       description="The main job: train an MLP and a CNN on scikit-learn's "
                       "digits, print test accuracy and the memory report, save the CNN.")
    p.add_argument("-o", "--output", default=None, metavar="FILE.mgm",
                   help=f"where to save the CNN's predictor (default {DEMO_OUTPUT})")
    p.add_argument("--epochs", type=_positive_int, default=None,
                   help="epochs for each model (default 30 for the MLP, 15 for the CNN)")
    p.add_argument("--train-size", type=_positive_int, default=None, metavar="N",
                   help="train on the first N training images (default all 1,437)")
    p.set_defaults(func=cmd_demo)
    return p


def _add_run(sub):
    p = sub.add_parser("run", help="run a saved model on .npy inputs",
                       description="Load a model file, feed it and print each output's "
                       "dtype, shape and summary, or write the outputs to an .npz.")
    p.add_argument("model", help="a model file written by mg.save")
    _add_input(p, "the model's input NAME from FILE.npy (NAME= may be left out when the "
               "model has one input); one per input")
    p.add_argument("-o", "--output", metavar="OUT.npz", help="write the outputs here")
    p.set_defaults(func=cmd_run)
    return p


def _add_report(sub):
    p = sub.add_parser("report", help="memory, passes and remat reports of a saved model")
    p.add_argument("model", help="a model file written by mg.save")
    p.add_argument("--json", action="store_true", help="the reports as one JSON object")
    _add_input(p, "a model with named dimensions: report its plan for the shape of FILE.npy")
    _add_dim(p)
    p.set_defaults(func=cmd_report)
    return p


def _add_tune(sub):
    p = sub.add_parser("tune", help="measure the ways of a saved model's kernels on this "
                       "machine and store the fastest",
                       description="Time every way each convolution and matrix product of the "
                       "model's plan can run (paths, threads) on its shapes, keep the fastest "
                       "and store the choices for this machine (mg.compile tune=\"measure\"), "
                       "so that loading the model here later uses them. What is stored "
                       "already is kept unless --again.")
    p.add_argument("model", help="a model file written by mg.save")
    p.add_argument("--again", action="store_true",
                   help="measure every instruction again, stored or not")
    p.add_argument("--json", action="store_true", help="the choices as one JSON object")
    _add_input(p, "a model with named dimensions: tune its plan for the shape of FILE.npy")
    _add_dim(p)
    p.set_defaults(func=cmd_tune)
    return p


def _add_viz(sub):
    p = sub.add_parser("viz", help="draw a saved model's plan: HTML page, SVG or DOT")
    p.add_argument("model", help="a model file written by mg.save")
    p.add_argument("-o", "--output", required=True, type=_viz_path, metavar="FILE",
                   help="FILE.html (the viewer page), FILE.svg (the graph) or FILE.dot")
    p.add_argument("--profile", type=_positive_int, metavar="N",
                   help="run the model N times under the profiler first: the page shows the "
                   "time of each instruction (inputs as for `mgegraph profile`)")
    _add_seed(p)
    _add_input(p, "feed the input NAME from FILE.npy instead of random values (--profile)")
    _add_dim(p)
    p.set_defaults(func=cmd_viz)
    return p


def _add_profile(sub):
    p = sub.add_parser("profile", help="time each instruction of a saved model's plan",
                       description="Run a model under the profiler and print the time per op "
                       "(per run, averaged over the runs). "
                       "Inputs not given with --input are seeded random: standard normal "
                       "floats, zeros for integers and booleans.")
    p.add_argument("model", help="a model file written by mg.save")
    p.add_argument("--runs", type=_positive_int, default=10, help="profiled runs (default 10)")
    p.add_argument("--trace", metavar="FILE.json",
                   help="write a Chrome/Perfetto trace (open in ui.perfetto.dev)")
    p.add_argument("--by", choices=("op", "instruction"), default="op",
                   help="one line per op (default) or per instruction of the plan")
    p.add_argument("--top", type=_positive_int, default=20, help="lines shown (default 20)")
    _add_seed(p)
    _add_input(p, "feed the input NAME from FILE.npy instead of random values")
    _add_dim(p)
    p.set_defaults(func=cmd_profile)
    return p


def _add_convert(sub):
    p = sub.add_parser("convert", help="import an ONNX model and save it as a model file")
    p.add_argument("model", metavar="MODEL.onnx", help="an ONNX model")
    p.add_argument("-o", "--output", metavar="MODEL.mgm",
                   help="the model file to write (default: MODEL.mgm beside MODEL.onnx)")
    p.add_argument("--input-shape", action="append", default=[], type=_shape_spec,
                   metavar="NAME=D,D,...", help="a static shape for an input with symbolic "
                   "dimensions (repeat per input)")
    p.add_argument("--freeze", action="store_true",
                   help="fold the weights into the plan as constants (mg.compile freeze=True)")
    p.set_defaults(func=cmd_convert)
    return p


def _add_bench(sub):
    p = sub.add_parser("bench", add_help=False, help="the benchmark table (`mgegraph bench "
                       "--help` for its options)")
    p.set_defaults(func=cmd_bench)
    return p


# -- export-c: the plan as a C program (mgegraph.deploy) ------------------------------------------
def _add_export_c(sub):
    p = sub.add_parser("export-c", help="write a saved model as C sources that run without "
                       "Python (docs/c_runtime.md)")
    p.add_argument("model", metavar="MODEL.mgm", help="a saved model")
    p.add_argument("-o", "--output", metavar="DIR", required=True,
                   help="the folder to write (made if missing)")
    p.add_argument("--dim", action="append", default=[], type=_dim_spec, metavar="NAME=N",
                   help="the value of a named dimension to specialise for (repeat per name)")
    p.set_defaults(func=cmd_export_c)
    return p


def cmd_export_c(args) -> int:
    """``mgegraph export-c MODEL.mgm -o DIR``: ``mg.deploy.export_c`` and how to build it."""
    deploy = _tool("mgegraph.deploy", "the C export")
    exported = deploy.export_c(args.model, args.output, bindings=dict(args.dim) or None)
    print(f"exported {args.model} -> {exported.directory}: kernels "
          f"{', '.join(exported.kernels)}; build with `make -C {exported.directory}`, run "
          f"`{exported.directory}/model_run {exported.directory}/model.mgr "
          f"{' '.join(n + '.npy' for n in exported.input_names)}`")
    return 0


def _add_seed(p) -> None:
    p.add_argument("--seed", type=_seed, default=0,
                   help="seed of the random inputs, an integer >= 0 (default 0)")


def _add_input(p, text: str) -> None:
    p.add_argument("--input", action="append", default=[], type=_feed_spec,
                   metavar="NAME=FILE.npy", help=text)


def _add_dim(p) -> None:
    p.add_argument("--dim", action="append", default=[], type=_dim_spec, metavar="NAME=N",
                   help="a model with named dimensions: the value of NAME (e.g. batch=8); a "
                   "name no --input or --dim binds takes its least value, 1 or its lower bound")


# argparse types: a bad value is a usage error naming what was written
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return value


def _feed_spec(text: str) -> tuple[str | None, str]:
    name, sep, path = text.partition("=")  # the first '=': a path may hold one (a=1/x.npy)
    if not sep:
        return None, text
    if not name:
        raise argparse.ArgumentTypeError(f"{text!r}: the name before '=' is empty")
    if not path:
        raise argparse.ArgumentTypeError(f"{text!r}: no file after '='")
    return name, path


def _dim_spec(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not (sep and name.isidentifier()) or number < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=N with N >= 1 (e.g. batch=8)")
    return name, number


def _shape_spec(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.split(",") if d.strip())
    except ValueError:
        shape = None
    if not (sep and name) or shape is None or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=D,D,... (e.g. input=1,3,224,224)")
    return name, shape


def _viz_path(text: str) -> str:
    if Path(text).suffix.lower() not in VIZ_FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r}: the file name must end in one of "
                                         f"{', '.join(VIZ_FORMATS)} (it picks the format)")
    return text


# -- the subcommands -----------------------------------------------------------------------------
def cmd_demo(args) -> int:
    """``mgegraph demo``: train, save, report; with the default epochs and all the data, a
    model below its target accuracy fails the command."""
    from . import demo  # lazy: startup cost (the demo loads nn and optim; nothing else does)

    accuracies = demo.run_demo(epochs=args.epochs, train_size=args.train_size,
                               output=args.output or demo.DEFAULT_OUTPUT,
                               progress=sys.stdout.isatty())
    if args.epochs is None and args.train_size is None:
        missed = {k: round(a, 4) for k, a in accuracies.items() if a < demo.TARGETS[k]}
        if missed:
            print(f"{PROG}: error: below target accuracy: {missed} (targets {demo.TARGETS})",
                  file=sys.stderr)
            return 1
    return 0


def cmd_run(args) -> int:
    """``mgegraph run MODEL --input NAME=FILE.npy ... [-o OUT.npz]``."""
    predictor = _load(args.model)
    feeds = read_feeds(predictor, args.input)
    outputs = predictor.run(feeds)
    if predictor.symbolic:
        print(f"{predictor.signature()}; ran with {binding(predictor, feeds, {})}")
    if args.output is None:
        for name, array in zip(predictor.output_names, outputs):
            print(summary_line(name, array))
        return 0
    written = args.output if args.output.endswith(".npz") else args.output + ".npz"

    def refuse(message: str):
        raise FeedError(f"-o {written}: {message}")

    write_npz(written, predictor.output_names, outputs, refuse)
    print(f"wrote {', '.join(predictor.output_names)} to {written}")
    return 0


def cmd_report(args) -> int:
    """``mgegraph report MODEL [--json]``: what the plan of a model file is, and why."""
    _not_onnx(args.model)
    loaded = read(args.model)
    if isinstance(loaded, dict):
        report = state_report(args.model, loaded)
        print(json.dumps(report, indent=1) if args.json else _state_text(report))
        return 0
    plan, bound = _specialised(Predictor(loaded), args)  # read()'s default limits
    report = model_report(args.model, loaded, bound)
    print(json.dumps(report, indent=1, default=str) if args.json
          else _model_text(report, plan, bound))
    return 0


def cmd_tune(args) -> int:
    """``mgegraph tune MODEL [--again] [--dim NAME=N]``: measure and store the kernels' ways of
    the model's plan (for the binding given, with named dimensions)."""
    _not_onnx(args.model)
    predictor = runtime.load(args.model, tune="measure" if args.again else "cached")
    plan, bound = _specialised(predictor, args)
    report = plan.kernels_report()
    if args.json:
        print(json.dumps({"model": args.model, "store": str(store_path()),
                          "bindings": dict(bound.values) if bound else {},
                          **report.to_dict()}, indent=1))
        return 0
    print(f"{args.model}" + (f" (the plan for {bound})" if bound else "")
          + f": choices stored in {store_path()}")
    print(report)
    return 0


def cmd_viz(args) -> int:
    """``mgegraph viz MODEL -o FILE.html|.svg|.dot [--profile N]``: the format is the file's
    suffix; ``--profile`` runs the model N times first, so the page shows each instruction's
    time."""
    _not_a_folder("-o", args.output)
    predictor = _load(args.model)
    suffix = Path(args.output).suffix.lower()
    if args.profile and suffix != ".html":
        raise ValueError(f"--profile {args.profile}: only the .html page shows the times, not "
                         f"{suffix}")
    prof = _profiled(predictor, args, args.profile) if args.profile else None
    plan, bound = _specialised(predictor, args)
    if suffix == ".dot":
        Path(args.output).write_text(plan.to_dot() + "\n")
    elif suffix == ".svg":
        Path(args.output).write_text(_tool("mgegraph.viz", "the viewer").to_svg(plan))
    else:
        viz = _tool("mgegraph.viz", "the viewer")
        viz.save_html(plan, args.output, profile=prof, title=Path(args.model).name)
    print(f"wrote {args.output}" + (f" (the plan for {bound})" if bound else ""))
    return 0


def cmd_profile(args) -> int:
    """``mgegraph profile MODEL [--runs N] [--trace FILE.json] [--input NAME=FILE.npy]``."""
    _not_a_folder("--trace", args.trace)
    predictor = _load(args.model)
    feeds, bound = _feeds(predictor, args, np.random.default_rng(args.seed))
    if bound is not None:
        print(f"{predictor.signature()}; profiled with {bound}")
    prof = _profiled(predictor, args, args.runs, trace=bool(args.trace), feeds=feeds)
    print(prof.table(top=args.top, by=args.by, average=True))
    if args.trace:
        prof.save_chrome_trace(args.trace)
        kept, count = len(prof.runs), prof.run_count
        which = "" if kept == count else (f"; it holds the first {kept} of the {count} runs, "
                                          "the table all of them")
        print(f"wrote {args.trace} (open it in ui.perfetto.dev or chrome://tracing{which})")
    return 0


def _profiled(predictor, args, runs: int, trace: bool = False, feeds: dict | None = None):
    """The profile of ``runs`` runs of ``predictor`` on ``feeds`` or those of ``args``
    (``--input``, the rest seeded random), after one unprofiled run (allocation, the weights'
    prologue). Without ``trace`` no run's own record is kept: the profile only aggregates, so
    any number of runs takes the same memory."""
    profiler = _tool("mgegraph.tools.profiler", "the profiler")
    if feeds is None:
        feeds, _ = _feeds(predictor, args, np.random.default_rng(args.seed))
    predictor.run(feeds)
    limit = profiler.TRACE_LIMIT if trace else 0
    with profiler.profile(trace_limit=limit) as prof:
        for _ in range(runs):
            predictor.run(feeds)
    return prof


def cmd_convert(args) -> int:
    """``mgegraph convert MODEL.onnx -o MODEL.mgm``: import, compile and ``mg.save``."""

    output = args.output or str(Path(args.model).with_suffix(".mgm"))
    try:
        _require_onnx()  # the importer reads the file itself: regular, sized, limits
        plan = mg_onnx.import_model(args.model,
                                    input_shapes=dict(args.input_shape) or None,
                                    freeze=args.freeze)
    except mg_onnx.OnnxImportError as exc:
        if exc.needs_constant or "input_shapes=" not in str(exc):
            raise
        raise mg_onnx.OnnxImportError(f"{exc} (on the command line: --input-shape "
                                      "NAME=D,D,...)") from exc
    if getattr(plan, "shape_inputs", None):
        # a model file holds one graph; these inputs' values choose between graphs
        raise mg_onnx.OnnxImportError(
            f"{args.model}: the inputs {', '.join(plan.shape_inputs)} decide shapes by their "
            "values, which a model file cannot take at run time; fix them with "
            "mg.onnx.import_model(path, constants={name: array}) and mg.save the plan")
    save(plan, output)
    ins = ", ".join(f"{n}: {type_text(t.shape, t.dtype)}" for n, t in input_types(plan).items())
    size = (f"specialised per binding of {', '.join(sorted(plan.names))} when run"
            if isinstance(plan, SymbolicPlan) else f"{len(plan.instructions)} instructions")
    print(f"converted {args.model} -> {output}: inputs {ins}; {len(output_types(plan))} "
          f"outputs, {size}")
    return 0


def _require_onnx() -> None:
    """``convert``'s own word where the onnx package is not installed."""
    try:
        import onnx  # noqa: F401  # lazy: optional dependency (onnx)
    except ModuleNotFoundError:
        raise ImportError('convert needs the onnx package: pip install -e ".[onnx]"') from None


def cmd_bench(args) -> int:
    """``mgegraph bench [WORKLOAD...] [options]``: ``mgegraph.tools.bench.main`` decides."""
    bench = _tool("mgegraph.tools.bench", "the benchmark table")
    try:
        return bench.main(args.bench_argv)
    except SystemExit as exit:  # its parser's --help and usage errors, as from ours
        return exit.code if isinstance(exit.code, int) else 1


# -- launch: a data-parallel job's processes through mpiexec (mgegraph.distributed) --------------
def _add_launch(sub):
    p = sub.add_parser("launch", help="run a training script in N processes through mpiexec "
                       "(the script calls mgegraph.distributed.init_process_group)",
                       description="Run `mpiexec -n N python SCRIPT ARGS...`: each process "
                       "joins the job with dist.init_process_group(). Across machines, run "
                       "mpiexec yourself with a hostfile (see the README).")
    p.add_argument("-n", "--nproc", type=_positive_int, required=True, metavar="N",
                   help="the number of processes")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="stop the whole job after this many seconds (default: no limit)")
    p.add_argument("script", help="the Python script each process runs")
    p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="the script's own arguments")
    p.set_defaults(func=cmd_launch, debug=False)
    return p


def cmd_launch(args) -> int:
    """``mgegraph launch -n N script.py ARGS``: the job's exit status (mpiexec's)."""
    from .distributed.launcher import launch  # lazy: startup cost (eager mode and MPI's tools)
    if not os.path.isfile(args.script):
        raise FileNotFoundError(f"launch: no script {args.script!r}")
    try:
        return launch(args.nproc, [args.script, *args.script_args], timeout=args.timeout)
    except RuntimeError as exc:  # DistributedError: no mpiexec, or past the timeout
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1


# -- helpers -------------------------------------------------------------------------------------
def _load(path: str):
    _not_onnx(path)
    return runtime.load(path)


def _not_a_folder(option: str, path: str | None) -> None:
    """An output that names a folder is refused before the work that would fill it is done
    (a long profile, say)."""
    if path is not None and os.path.isdir(path):
        raise FeedError(f"{option} {path}: is a directory; give a file name")


def _not_onnx(path: str) -> None:
    """An ONNX file given where a model file is expected: say how to get one."""
    if Path(path).suffix.lower() == ".onnx":
        raise ModelFormatError(f"{path} is an ONNX model, not a model file; convert it first: "
                               f"mgegraph convert {path} -o {Path(path).with_suffix('.mgm')}")


def _tool(module: str, what: str):
    """A tool module of this package; a one-line error when this build does not have it."""
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"{what} ({module}) is not part of this mgegraph build")
    return importlib.import_module(module)


def _feeds(predictor, args, rng: np.random.Generator | None = None):
    """The ``--input`` arrays of ``args`` (with ``rng``, random ones for the other inputs) and,
    for a model with named dimensions, the ``Binding`` they and ``--dim`` make (else None)."""
    return feeds_and_binding(predictor, args.input, dict(getattr(args, "dim", ())), rng)


def _specialised(predictor, args):
    """The plan a command shows for ``predictor`` and the binding it was specialised for
    (``_feeds``): a fixed-shape model's one plan and None (its ``--input`` files unread)."""
    if not predictor.symbolic and not getattr(args, "dim", ()):
        return predictor.plan, None
    _, bound = _feeds(predictor, args)  # a --dim for a fixed-shape model: refused here
    return predictor.specialize(bound.values), bound


def summary_line(name: str, array: np.ndarray) -> str:
    """``name: dtype[shape]  min .. mean .. max ..`` over the finite values, and how many
    are not finite.

    >>> summary_line("y", np.array([1.0, 3.0]))   # 'y: float64[2]  min 1  mean 2  max 3'
    """
    text = f"{name}: {type_text(array.shape, array.dtype)}"
    if array.size == 0:
        return text + "  (empty)"
    values = array.astype(np.float64).ravel()
    finite = values[np.isfinite(values)]
    if finite.size:
        text += f"  min {finite.min():.6g}  mean {finite.mean():.6g}  max {finite.max():.6g}"
    if finite.size < values.size:
        text += f"  ({values.size - finite.size} not finite)"
    return text


# -- reports -------------------------------------------------------------------------------------
def model_report(path: str, loaded, bound=None) -> dict:
    """The ``report --json`` object of a model file: its inputs and outputs, the plan's size
    and its memory, passes and remat reports (``remat`` is None without remat=). A model with
    named dimensions reports its plan for ``bound`` (an ``io.feeds.Binding``), and under
    ``symbolic`` its names, bounds, recorded facts, cache size and that binding.

    >>> model_report("m.mgm", mg.io.read("m.mgm"))["memory"]["arena_bytes"]
    """
    symbolic = isinstance(loaded.plan, SymbolicPlan)
    plan = loaded.plan.specialize(bound.values) if symbolic else loaded.plan
    types, outs = input_types(loaded.plan), output_types(loaded.plan)
    report = {
        "model": str(path), "kind": loaded.kind,
        "inputs": [_io_entry(n, types[n]) for n in loaded.input_names],
        "outputs": [_io_entry(n, t) for n, t in zip(loaded.output_names, outs)],
        "device": plan.device, "instructions": len(plan.instructions), "slots": len(plan.slots),
        "prologue_instructions": len(plan.prologue.instructions) if plan.prologue else 0,
        "memory": json.loads(plan.memory_report(format="json")),
        "passes": [{"name": name, "changes": stats} for name, stats in plan.passes],
        "remat": json.loads(plan.remat_report("json")) if plan.remat is not None else None,
        "kernels": plan.kernels_report().to_dict()["instructions"],
    }
    if symbolic:
        report["symbolic"] = _symbolic_entry(loaded.plan, bound)
    return report


def _symbolic_entry(plan: SymbolicPlan, bound) -> dict:
    return {
        "names": sorted(plan.names),
        "bounds": {name: list(pair) for name, pair in sorted(plan.bounds.items())},
        "constraints": [{"fact": str(f), "op": f.op, "location": f.location}
                        for f in plan.constraints],
        "cache_size": plan.cache_size,
        "bindings": dict(sorted(bound.values.items())), "defaulted": list(bound.defaulted)}


def _io_entry(name: str, t) -> dict:
    shape = [d if isinstance(d, int) else str(d) for d in t.shape]
    return {"name": name, "shape": shape, "dtype": str(t.dtype)}


def _model_text(report: dict, plan, bound=None) -> str:
    def io(entries):
        return ", ".join(f"{e['name']}: {type_text(e['shape'], e['dtype'])}" for e in entries)

    prologue = (f"; prologue {report['prologue_instructions']} instructions (weight-only work, "
                "rerun after a weight changes)" if report["prologue_instructions"] else "")
    remat = plan.remat_report() if plan.remat is not None else "not compiled with remat="
    return "\n".join([
        (f"model {report['model']}: a {report['kind']} for {report['device']}, "
         f"{report['instructions']} instructions over {report['slots']} slots{prologue}"),
        f"  inputs   {io(report['inputs'])}", f"  outputs  {io(report['outputs'])}",
        *_symbolic_lines(report.get("symbolic"), bound),
        "", "memory", plan.memory_report(), "", "passes", plan.passes_report(),
        "", "remat", remat, "", str(plan.kernels_report())])


def _symbolic_lines(entry: dict | None, bound) -> list[str]:
    """The names, their bounds, the facts the rules recorded and the binding reported."""
    if entry is None:
        return []
    names = ", ".join(f"{n} in {entry['bounds'][n][0]}..{entry['bounds'][n][1]}"
                      if n in entry["bounds"] else f"{n} >= 1" for n in entry["names"])
    lines = [f"  names    {names}; up to {entry['cache_size']} specialised plans kept"]
    lines += [f"  requires {c['fact']}  ({c['op']} at {c['location']})"
              for c in entry["constraints"]]
    return lines + [f"  plan for {bound}: the reports below"]


def state_report(path: str, state: dict) -> dict:
    """The ``report --json`` object of a weights file (``mg.save(state_dict)``)."""
    arrays = [{**_io_entry(n, a), "bytes": int(a.nbytes)} for n, a in state.items()]
    return {"model": str(path), "kind": "state_dict", "arrays": arrays,
            "bytes": sum(a["bytes"] for a in arrays)}


def _state_text(report: dict) -> str:
    lines = [(f"weights {report['model']}: {len(report['arrays'])} arrays, "
              f"{report['bytes']} bytes (a state dict: no plan to report)")]
    lines += [f"  {a['name']}: {a['dtype']}{a['shape']}" for a in report["arrays"]]
    return "\n".join(lines)
