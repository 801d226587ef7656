"""``aotc inspect``: what an artifact holds, as text or JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from aotc_cli.errors import UserError, debug_option
from aotc_cli.feeds import output_names
from aotc_cli.text import format_size, table


def _shape(entry: dict[str, Any]) -> str:
    return "(" + ", ".join(entry["shape"]) + ")"


def _counts(op_counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {n}" for op, n in sorted(op_counts.items(), key=lambda kv: (-kv[1], kv[0])))


def render_text(info: dict[str, Any]) -> str:
    """The describe() dict for a reader: interface first, then dims, guards, sizes and variants."""
    lines = [
        f"model      {info['model_name']}",
        f"versions   format {info['format_version']}, schema {info['schema_version']}, "
        f"written by aotc {info['producer_version']}",
        f"file       {format_size(info['file_size'])}, checksums {info['checksums']}",
        f"weights    {info['constants']} constants, {format_size(info['weight_bytes'])}",
        "inputs",
    ]
    lines += table([[i["name"], i["dtype"], _shape(i)] for i in info["inputs"]], "  ")
    names = dict(output_names(info["output_tree"]))
    lines.append("outputs")
    lines += table([[names.get(o["index"], str(o["index"])), o["dtype"], _shape(o)] for o in info["outputs"]], "  ")
    lines.append("dims")
    dims = []
    for s in info["symbols"]:
        mult = f", multiple of {s['multiple_of']}" if s["multiple_of"] != 1 else ""
        dims.append([s["name"], f"in [{s['min']}, {s['max']}]{mult}"])
    lines += table(dims, "  ")
    lines.append("guards")
    lines += table([[g["guard"], f"(from {g['loc']})" if g["loc"] else ""] for g in info["guards"]], "  ")
    lines.append("variants")
    for v in info["variants"]:
        lines.append(f"  {v['index']}: {v['name']}: {v['nodes']} ops ({_counts(v['op_counts'])})")
    if info.get("source"):
        src = info["source"]
        lines.append(f"source     high-level graph, {src['nodes']} ops ({_counts(src['op_counts'])})")
    if info.get("meta"):
        lines.append("meta")
        lines += [f"  {k}: {json.dumps(v)}" for k, v in info["meta"].items()]
    shown = {
        "model_name", "format_version", "schema_version", "producer_version", "file_size", "checksums",
        "constants", "weight_bytes", "inputs", "outputs", "output_tree", "symbols", "guards", "variants",
        "source", "meta",
    }  # fmt: skip
    # anything describe() grows later still shows, as JSON
    lines += [f"{k}: {json.dumps(v)}" for k, v in info.items() if k not in shown]
    return "\n".join(lines)


@click.command("inspect")
@click.argument("artifact", metavar="ARTIFACT")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@debug_option
def inspect_command(artifact: str, as_json: bool) -> None:
    """Show what ARTIFACT holds: versions, inputs and outputs with symbolic shapes, dims and their
    ranges, guards, op counts, weight bytes and checksum status."""
    from aotc.artifact.describe import describe
    from aotc.artifact.reader import read_artifact

    if not Path(artifact).is_file():
        raise UserError(f"no such file: {artifact}")
    info = describe(read_artifact(artifact))
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(render_text(info))
