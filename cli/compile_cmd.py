"""``aotc compile``: a model file, an ONNX file or a saved torch.export program -> one artifact file."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from aotc.errors import AotcError
from aotc.ir.graph import Graph
from aotc.lowering.options import CompileOptions
from aotc.lowering.precision import PRECISIONS
from aotc.progress import StageTimer
from aotc_cli.dims import parse_dim_names, parse_dim_ranges
from aotc_cli.errors import UserError, debug_option
from aotc_cli.loader import call_user_code, load_model
from aotc_cli.paths import check_output_path, require_file
from aotc_cli.text import format_size

if TYPE_CHECKING:
    from aotc.compiler import CompiledModel

HELP = """Compile FILE into an artifact.

FILE is a Python model file, an ONNX file (.onnx) or a torch.export program
saved with torch.export.save (.pt2).

A model file defines a function `build()` (no required arguments) returning
`(model, inputs)`, or, when it has no `build`, module-level `model` and
`inputs`. `model` is an aotc.nn.Module, a plain function of tensors or a
torch.nn.Module (captured with torch.export: pip install 'aotc[torch]');
`inputs` maps each forward argument name to an aotc.TensorSpec.
`--model NAME` compiles `NAME` with the specs in `NAME_inputs` instead, or,
when the file has no `NAME_inputs`, calls `NAME()` like `build()`.

For ONNX files, each symbolic dimension (dim_param) gets its range from
`--dim NAME=MIN:MAX` (repeatable).

A .pt2 program brings its dims and their ranges, but torch.export.save keeps
no dim names: each is named after its input and axis (`x_0`) unless
`--dim-name INPUT:AXIS=NAME` (repeatable) names it, e.g. `--dim-name x:0=batch`.

The artifact goes to -o, or to FILE's stem + `.aotc` in the current folder.
"""


def build_artifact(
    graph: Graph, dump_ir: str | None, timer: StageTimer, options: CompileOptions | None = None
) -> bytes:
    """Lower a traced or imported graph and write the artifact through ``aotc.compile``'s own path,
    reporting each stage to ``timer``."""
    return compile_model(graph, dump_ir, timer, options).artifact_bytes


def compile_model(
    graph: Graph, dump_ir: str | None, timer: StageTimer, options: CompileOptions | None = None
) -> CompiledModel:
    from aotc.compiler import compile_graph

    return compile_graph(graph, options=options, dump_ir=dump_ir, progress=timer)


def _trace_python(path: Path, model_name: str | None, timer: StageTimer) -> Graph:
    from aotc.frontend.trace import trace

    with timer.stage("load model file"):
        model, inputs = load_model(path, model_name)
    with timer.stage("trace"):
        return call_user_code(path.resolve(), "tracing the model", trace, model, inputs, name=model_name or path.stem)


def _import_program(path: Path, dim_names: dict[str, dict[int, str]], timer: StageTimer) -> Graph:
    """A program torch.export.save wrote, as a graph whose dims take ``dim_names``."""
    from aotc.torch_export import import_torch
    from aotc.torch_export._torch import require_torch

    torch = require_torch()
    with timer.stage("load program"):
        try:
            program = torch.export.load(str(path))
        except Exception as e:  # a zip of something else, an AOTInductor package, a newer schema: say which
            first = next((t.strip() for t in str(e).splitlines() if t.strip()), "")
            raise UserError(
                f"{path} is not a program torch.export.save wrote that this torch {torch.__version__} can load "
                f"({type(e).__name__}: {first[:200]})"
            ) from None
    with timer.stage("translate"):
        return import_torch(program, name=path.stem if path.stem.isidentifier() else None, dim_names=dim_names)


def _import_onnx(path: Path, dims: dict[str, tuple[int, int]], timer: StageTimer) -> Graph:
    import aotc.onnx  # its names raise UnsupportedError, saying what to install, when onnx is missing

    with timer.stage("import onnx"):
        # the importer rejects a --dim the model doesn't have, naming the dims it does have
        return aotc.onnx.import_onnx(path, dims=dims)


@click.command("compile", help=HELP)
@click.argument("file", metavar="FILE")
@click.option("-o", "--output", metavar="OUT", help="Artifact path.  [default: ./<FILE stem>.aotc]")
@click.option("--model", "model_name", metavar="NAME", help="Compile NAME (and NAME_inputs) instead of build().")
@click.option("--dim", "dims", multiple=True, metavar="NAME=MIN:MAX", help="ONNX only: range of a symbolic dim.")
@click.option(
    "--dim-name",
    "dim_names",
    multiple=True,
    metavar="INPUT:AXIS=NAME",
    help=".pt2 only: the name of a dynamic dim of a saved torch.export program (torch.export.save drops them).",
)
@click.option("--dump-ir", metavar="DIR", help="Write the graph before and after every lowering stage to DIR.")
@click.option("-v", "--verbose", is_flag=True, help="Time every compile stage, not only those over a second.")
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default="fp32",
    show_default=True,
    help="bf16/fp16: matmuls, convs and attention in half precision with float32 accumulation, weights stored "
    "in it; tf32: float32 matmuls may use tf32 tensor cores on a GPU (no change on the cpu); tf32x3: float32 "
    "matmuls in three tf32 products on tensor cores, float32-class error (no change on the cpu).",
)
@click.option("--no-matmul-padding", is_flag=True, help="Never pad matmul dims to 16-byte alignment.")
@click.option("--no-split-k", is_flag=True, help="Never split the K loop of a small-output, long-K matmul.")
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="SM",
    help="GPU architecture to compile the kernels for, e.g. sm_80 (repeatable; 'none' for no binaries).  "
    "[default: sm_80 and sm_90]",
)
@click.option(
    "--cuda-driver-floor",
    "driver_floor",
    metavar="MAJOR.MINOR",
    help="The oldest CUDA driver release the kernels must load on: it picks the ptxas and the PTX version of "
    "each target (PTX 8.4 and a CUDA 12 ptxas for 12.4).  [default: 12.4]",
)
@click.option("--explain", is_flag=True, help="Print each kernel (what it fuses) and each fusion declined, and why.")
@click.option(
    "--dump-kernels",
    "dump_kernels",
    metavar="DIR",
    help="Also write each kernel to DIR as a .py file that runs on its own under TRITON_INTERPRET=1 (its grid, "
    "tiles and the graph nodes it computes in its docstring).",
)
@click.option(
    "--autotune",
    is_flag=True,
    help="Time candidate tiles of the matmul, conv and attention kernels on this machine's GPU and store the "
    "fastest for its architecture (needs an NVIDIA GPU and aotc[cuda]).",
)
@click.option(
    "--sign",
    "sign_key",
    metavar="KEY",
    help="Sign the artifact with this Ed25519 private key (PEM or OpenSSH file; see aotc keygen).",
)
@click.option(
    "--tune-dim",
    "tune_dims",
    multiple=True,
    metavar="NAME=VALUE",
    help="The value of a dynamic dim to size tuned tiles for: the shipped tuned table's lookup and --autotune's "
    "timing (repeatable).  [default: each dim's maximum]",
)
@debug_option
def compile_command(
    file: str,
    output: str | None,
    model_name: str | None,
    dims: tuple[str, ...],
    dim_names: tuple[str, ...],
    dump_ir: str | None,
    verbose: bool,
    precision: str,
    no_matmul_padding: bool,
    no_split_k: bool,
    targets: tuple[str, ...],
    driver_floor: str | None,
    explain: bool,
    dump_kernels: str | None,
    autotune: bool,
    tune_dims: tuple[str, ...],
    sign_key: str | None,
) -> None:
    env = CompileOptions.from_env()
    options = dataclasses.replace(
        env, precision=precision, matmul_padding=not no_matmul_padding, split_k=env.split_k and not no_split_k
    )
    if targets:
        options = dataclasses.replace(options, targets=_parse_targets(targets))
    if driver_floor is not None:
        try:
            options = dataclasses.replace(options, cuda_driver_floor=driver_floor)
        except AotcError as e:
            raise UserError(f"--cuda-driver-floor: {e}") from e
    if tune_dims:
        options = dataclasses.replace(options, tune_dims=_parse_tune_dims(tune_dims))
    if autotune:
        if not options.targets:
            raise UserError("--autotune records its winners per GPU target: drop --target none")
        options = dataclasses.replace(options, autotune=True)
    ranges = parse_dim_ranges(dims)
    names = parse_dim_names(dim_names)
    path = require_file(file)
    if names and path.suffix != ".pt2":
        raise UserError("--dim-name applies to saved torch.export programs (.pt2); a model file names its aotc.Dims")
    out = check_output_path(output if output else path.stem + ".aotc")
    private_key = _load_signing_key(sign_key) if sign_key else None  # before the compile, so a bad key costs nothing
    timer = StageTimer(threshold_s=0.0 if verbose else 1.0)
    start = time.perf_counter()
    if path.suffix == ".onnx":
        if model_name:
            raise UserError("--model applies to Python model files, not ONNX files")
        graph = _import_onnx(path, ranges, timer)
    elif path.suffix == ".py":
        if ranges:
            raise UserError("--dim applies to ONNX files; a model file declares its dims with aotc.Dim")
        graph = _trace_python(path, model_name, timer)
    elif path.suffix == ".pt2":
        if model_name:
            raise UserError("--model applies to Python model files, not saved programs")
        if ranges:
            raise UserError("--dim applies to ONNX files; a saved program brings its dims' ranges")
        graph = _import_program(path, names, timer)
    else:
        raise UserError(
            f"{file}: expected a Python model file (.py), an ONNX file (.onnx) or a saved torch.export program (.pt2)"
        )
    compiled = compile_model(graph, dump_ir, timer, options)
    data = compiled.artifact_bytes
    if private_key is not None:
        from aotc.artifact.signing import sign_bytes

        with timer.stage("sign"):
            data = sign_bytes(data, private_key)
    out.write_bytes(data)
    timer.finish()
    if explain:
        click.echo(compiled.explain(), nl=False)
    if dump_kernels is not None:
        _dump_kernels(out, Path(dump_kernels))
    click.echo(f"wrote {out} ({format_size(len(data))}) in {time.perf_counter() - start:.1f}s")
    if private_key is not None:
        from aotc.artifact.sigblock import fingerprint

        click.echo(f"signed with key {fingerprint(private_key.public_key().public_bytes_raw())}")


def _dump_kernels(artifact: Path, folder: Path) -> None:
    from aotc.artifact.reader import read_artifact
    from aotc_cli.kernel_files import kernel_files

    files = kernel_files(read_artifact(artifact, verify_weights=False))
    if not files:
        raise UserError(f"--dump-kernels: {artifact} has no kernels (compiled with --target none?)")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    click.echo(f"wrote {len(files)} kernels to {folder}")


def _load_signing_key(key: str) -> Any:
    from aotc.artifact.signing import load_private_key

    return load_private_key(require_file(key, "--sign"))


def _parse_targets(targets: tuple[str, ...]) -> tuple[str, ...]:
    from aotc.errors import AotcError
    from aotc.lowering.options import parse_targets

    try:
        return parse_targets(",".join(targets))
    except AotcError as e:
        raise UserError(f"--target: {e}") from e


def _parse_tune_dims(items: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """``("batch=8", "seq=1024")`` -> (("batch", 8), ("seq", 1024)); the model checks names and ranges."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise UserError(f"--tune-dim {item!r}: expected NAME=VALUE with an integer value, e.g. batch=8")
        if name.strip() in out:
            raise UserError(f"--tune-dim {name.strip()} is given twice")
        out[name.strip()] = int(value)
    return tuple(out.items())
