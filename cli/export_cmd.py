"""``aotc export-onnx``: a model file or an artifact -> an ONNX file."""

from __future__ import annotations

import click

from aotc_cli.errors import UserError, debug_option
from aotc_cli.loader import call_user_code, load_model
from aotc_cli.paths import check_output_path, require_file


@click.command("export-onnx")
@click.argument("source", metavar="FILE.py|ARTIFACT")
@click.option("-o", "--output", required=True, metavar="OUT.onnx", help="Where to write the ONNX model.")
@click.option("--model", "model_name", metavar="NAME", help="For model files: as in `aotc compile --model`.")
@debug_option
def export_command(source: str, output: str, model_name: str | None) -> None:
    """Write the model in FILE.py, or the high-level graph stored in ARTIFACT, as ONNX.

    Dynamic dims become ONNX dim_params of the same name."""
    path = require_file(source)
    check_output_path(output)
    import aotc.onnx as onnx_api  # its names raise UnsupportedError, saying what to install, when onnx is missing

    if path.suffix == ".py":
        model, inputs = load_model(path, model_name)
        call_user_code(path.resolve(), "tracing the model", onnx_api.export_onnx, model, inputs, output)
    else:
        from aotc.artifact.reader import read_artifact

        if model_name:
            raise UserError("--model applies to Python model files, not artifacts")
        art = read_artifact(path)
        if art.source is None:
            raise UserError(f"{source} holds no high-level graph to export (it was written without one)")
        onnx_api.export_graph(art.source, output)
    click.echo(f"wrote {output}")
