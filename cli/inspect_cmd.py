"""``aotc inspect``: what an artifact holds, as text or JSON."""

from __future__ import annotations

import json
from typing import Any

import click

from aotc_cli.errors import debug_option
from aotc_cli.feeds import output_names
from aotc_cli.kernel_files import kernel_files
from aotc_cli.paths import require_file
from aotc_cli.text import format_size, table

# The meta key under which the compiler records each matmul the padding pass padded (its --explain line).
PADDED_KEY = "padded_matmuls"


def _shape(entry: dict[str, Any]) -> str:
    return "(" + ", ".join(entry["shape"]) + ")"


def _counts(op_counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {n}" for op, n in sorted(op_counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _kernel_lines(info: dict[str, Any]) -> list[str]:
    """The kernels (name, targets, warps, shared memory, fused primitives) and the arena at the symbols' maxima."""
    lines = []
    if info.get("unusable_kernel_features"):
        lines.append(f"kernels    not usable by this aotc (needs {', '.join(info['unusable_kernel_features'])})")
    kernels = info.get("kernels") or []
    if not kernels:
        if not info.get("unusable_kernel_features"):
            lines.append("kernels    none (cpu only)")
        return lines
    with_bin = sum(bool(k["targets"]) for k in kernels)
    lines.append(f"kernels    {len(kernels)} ({'with cubins and PTX' if with_bin else 'source only, no targets'})")
    rows = []
    for k in kernels:
        targets = ",".join(k["targets"]) or "-"
        shared = format_size(k["shared"]) if k["shared"] is not None else "-"
        rows.append([k["name"], targets, f"{k['num_warps']} warps", f"smem {shared}", " ".join(k["ops"])])
    lines += table(rows, "  ")
    chain = info.get("toolchain")
    if chain:
        built = [
            (f"{kind} " if kind != "PTX" else "portable ")
            + ", ".join(f"PTX {i['ptx']}" + (f" (ptxas {i['ptxas']})" if kind != "PTX" else "") for i in imgs)
            for kind, imgs in chain["images"].items()
        ]
        lines.append(f"toolchain  triton {', '.join(chain['triton'])}: {'; '.join(built)}")
        lines.append(f"driver     loads on CUDA drivers {chain['cuda_driver_floor']} and newer")
    if info.get("arena_bytes") is not None:
        lines.append(f"arena      {format_size(info['arena_bytes'])} at most (every dim at its maximum)")
        grows = [(d, b) for d, b in (info.get("arena_by_dim") or {}).items() if b > 0]
        if grows:  # the dims the arena grows with, the one that dominates first: what --dim ranges to narrow
            ranges = {s["name"]: s for s in info.get("symbols", [])}
            lines.append(
                "           with one dim at its maximum and the others at their minimum: "
                + ", ".join(f"{d}={ranges[d]['max'] if d in ranges else 'max'}: {format_size(b)}" for d, b in grows)
            )
    return lines


def render_text(info: dict[str, Any]) -> str:
    """The describe() dict for a reader: interface first, then dims, guards, sizes and variants."""
    lines = [
        f"model      {info['model_name']}",
        f"versions   format {info['format_version']}, schema {info['schema_version']}, "
        f"written by aotc {info['producer_version']}",
        f"file       {format_size(info['file_size'])}, checksums {info['checksums']}"
        + ("" if info.get("segments_verified", True) else " (--verify reads and checks the weights)"),
        f"weights    {info['constants']} constants, {format_size(info['weight_bytes'])}",
        "inputs",
    ]
    lines += table([[i["name"], i["dtype"], _shape(i)] for i in info["inputs"]], "  ")
    names = dict(output_names(info["output_tree"]))
    lines.append("outputs")
    lines += table([[names.get(o["index"], str(o["index"])), o["dtype"], _shape(o)] for o in info["outputs"]], "  ")
    if info.get("states"):
        lines.append(
            f"states     kept across calls, {format_size(info['state_bytes_per_session'])} a session (at the dims' maxima)"
        )
        lines += table(
            [[st["name"], st["dtype"], _shape(st), f"{st['writers']} write(s)"] for st in info["states"]], "  "
        )
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
    lines += _kernel_lines(info)
    if info.get("onnx"):
        lines.append(f"onnx       {onnx_line(info['onnx'])}")
    if "signature" in info:
        lines.append(f"signature  {signature_line(info['signature'])}")
    meta = dict(info.get("meta") or {})
    meta.pop("onnx", None)  # the compiler's summary of the ONNX model: the onnx line above
    padded = meta.get(PADDED_KEY)
    if isinstance(padded, list) and all(isinstance(p, str) for p in padded):  # else it shows as JSON below
        del meta[PADDED_KEY]
        lines.append("matmul padding")
        lines += [f"  {p}" for p in padded]
    if meta:
        lines.append("meta")
        lines += [f"  {k}: {json.dumps(v)}" for k, v in meta.items()]
    shown = {
        "model_name", "format_version", "schema_version", "producer_version", "file_size", "checksums",
        "segments_verified",
        "constants", "weight_bytes", "inputs", "outputs", "output_tree", "symbols", "guards", "variants",
        "source", "meta", "features", "kernel_features", "unusable_kernel_features", "kernels", "toolchain", "arena_bytes",
        "arena_by_dim", "onnx",
        "signature", "states", "state_bytes_per_session",
    }  # fmt: skip
    # anything describe() grows later still shows, as JSON
    lines += [f"{k}: {json.dumps(v)}" for k, v in info.items() if k not in shown]
    return "\n".join(lines)


def onnx_line(onnx: dict[str, Any]) -> str:
    """The ONNX model the file stores for tools, or why it has none. device='cpu' runs neither: it writes its
    onnxruntime model from the verified variant graph at load."""
    if not onnx["stored"]:
        return f"none ({onnx['reason']})"
    line = f"{format_size(onnx['bytes'])} model of the high-level graph (for tools; device='cpu' does not run it)"
    if onnx.get("nodes") is not None:
        line += f": {onnx['nodes']} nodes, {onnx['weights']} weights as inputs named after constants"
    line += ", computes in float32"
    if onnx.get("widened_from"):
        line += f" (widened from {' and '.join(onnx['widened_from'])})"
    return line


def signature_line(sig: dict[str, Any]) -> str:
    if not sig["signed"]:
        return "none (unsigned)" + (f": {sig['error']}" if sig["error"] else "")
    line = f"{sig['algorithm']}, key {sig['key']}"
    if sig["verified"] is None:
        return line + " (not verified: give --trusted-key)"
    return line + (", verified against a trusted key" if sig["verified"] else f", NOT VERIFIED: {sig['error']}")


@click.command("inspect")
@click.argument("artifact", metavar="ARTIFACT")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option(
    "--verify",
    is_flag=True,
    help="Also check every data segment's checksum (reads all the weights; without it only the header is checked).",
)
@click.option(
    "--trusted-key",
    "trusted_keys",
    multiple=True,
    metavar="KEY.pub",
    help="Verify the signature against this Ed25519 public key (repeatable; reads every byte). Exit 1 unless it verifies.",
)
@click.option(
    "--kernels",
    "show_kernels",
    is_flag=True,
    help="Also print each kernel's Triton source, with the graph nodes it computes, its grid and tiles "
    '(as compile --dump-kernels writes them; with --json, under "kernel_sources").',
)
@debug_option
def inspect_command(
    artifact: str, as_json: bool, verify: bool, trusted_keys: tuple[str, ...], show_kernels: bool
) -> None:
    """Show what ARTIFACT holds: versions, inputs and outputs with symbolic shapes, dims and their
    ranges, guards, op counts, kernels (targets, fused ops, warps, shared memory), the arena size,
    the matmuls the compiler padded for alignment, weight bytes, checksum status and its signature
    (the signing key's fingerprint).

    The header (preamble, FlatBuffer, graphs) is verified in full; the weights are not read unless
    --verify or --trusted-key is given, so inspecting a large file is instant. With --trusted-key the
    signature is verified over every byte, and a file it does not verify for is described, then refused
    (exit 1)."""
    from aotc.artifact.describe import describe
    from aotc.artifact.reader import read_artifact

    path = require_file(artifact)
    keys = [require_file(k, "--trusted-key") for k in trusted_keys]
    art, refused = None, None
    if keys:
        from aotc.artifact.sigblock import SignatureError

        try:
            art = read_artifact(path, trusted_keys=keys)
        except SignatureError as e:
            refused = e
    if art is None:
        try:
            art = read_artifact(path, verify_weights=verify)
        except Exception:
            if refused is not None:
                raise refused from None  # the signature says why better than the check that caught it
            raise
    info = describe(art)
    info["signature"] = {
        "signed": art.signed_by is not None,
        "algorithm": "ed25519" if art.signed_by is not None else None,
        "key": art.signed_by,
        "verified": art.signature_verified if keys else None,
        "error": str(refused).removeprefix(f"invalid artifact {str(path)!r}: ") if refused is not None else None,
    }
    sources = kernel_files(art) if show_kernels else {}
    if as_json:
        click.echo(json.dumps({**info, "kernel_sources": sources} if show_kernels else info, indent=2))
    else:
        click.echo(render_text(info))
        for name, text in sources.items():
            click.echo(f"\n# ---- {name} " + "-" * max(0, 100 - len(name)) + "\n" + text, nl=False)
    if refused is not None:
        raise refused
