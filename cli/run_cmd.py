"""``aotc run``: load an artifact, feed it inputs, print a summary of the outputs."""

from __future__ import annotations

import time

import click
import numpy as np

from aotc_cli.dims import parse_dim_values, parse_input_files
from aotc_cli.errors import debug_option
from aotc_cli.feeds import build_feeds, output_names
from aotc_cli.paths import check_output_path, require_file
from aotc_cli.text import table

HELP = """Run ARTIFACT once and summarize its outputs.

Each input comes from `--input NAME=FILE.npy`, or, with `--random`, is drawn
at random (seeded by --seed): floats standard normal, bools fair coin flips,
integers from [0, 2) (0 or 1, so token ids, indices and masks are all valid).
A dynamic dim takes its `--dim NAME=VALUE`, else the size of a file given with
--input, else the value in range nearest to 8 that meets the artifact's guards.
Dims and shapes are checked against the artifact's ranges and guards, and the
-o path against the file system, before any input is built or the model runs.
With --trusted-key, ARTIFACT must be signed by one of the keys (aotc sign), else
it is refused before anything runs. A model that keeps state across calls runs
once in a fresh session (its states at their initial values); `aotc generate`
decodes with one.
"""


def _stats(a: np.ndarray) -> tuple[str, str, str]:
    if a.size == 0:
        return "-", "-", "-"
    x = a.astype(np.float64)
    return f"{x.min():.4g}", f"{x.max():.4g}", f"{x.mean():.4g}"


@click.command("run", help=HELP)
@click.argument("artifact", metavar="ARTIFACT")
@click.option("--input", "input_files", multiple=True, metavar="NAME=FILE.npy", help="An input from a .npy file.")
@click.option("--random", "random_inputs", is_flag=True, help="Draw every input not given with --input at random.")
@click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE", help="Value of a dynamic dim for random inputs.")
@click.option("--seed", default=0, show_default=True, help="Seed for --random.")
@click.option(
    "--device", metavar="DEVICE", help="cpu, reference, cuda, cuda:N or interpret  [default: the best available]"
)
@click.option(
    "--threads",
    type=click.IntRange(min=0),
    metavar="N",
    help="onnxruntime's intra-op threads on the cpu device (0: its default, one per physical core).",
)
@click.option("-o", "--output", metavar="OUT.npz", help="Also write the outputs to an .npz file.")
@click.option(
    "--trusted-key",
    "trusted_keys",
    multiple=True,
    metavar="KEY.pub",
    help="Run ARTIFACT only if it is signed by this Ed25519 public key (PEM or OpenSSH; repeatable: any of them).",
)
@debug_option
def run_command(
    artifact: str,
    input_files: tuple[str, ...],
    random_inputs: bool,
    dims: tuple[str, ...],
    seed: int,
    device: str | None,
    threads: int | None,
    output: str | None,
    trusted_keys: tuple[str, ...],
) -> None:
    import aotc

    files, dim_values = parse_input_files(input_files), parse_dim_values(dims)
    require_file(artifact)
    if output:
        check_output_path(output)
    keys = [require_file(k, "--trusted-key") for k in trusted_keys]
    exe = aotc.load(artifact, device=device, trusted_keys=keys or None, threads=threads)
    graph = exe.artifact.variants[0].graph
    feeds, env = build_feeds(graph, files, dim_values, random_inputs, seed, check=exe.check)
    start = time.perf_counter()
    flat = exe.session().run(feeds) if exe.stateful else exe.run(feeds)
    elapsed_ms = (time.perf_counter() - start) * 1e3

    if env:
        click.echo("dims: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    rows = [("input", "shape", "dtype", "source")]
    rows += [(n, str(a.shape), str(a.dtype), files.get(n, "random")) for n, a in feeds.items()]
    click.echo("\n".join(table(rows)))
    click.echo()
    named = [(name, np.asarray(flat[i])) for i, name in output_names(graph.output_tree)]
    rows = [("output", "shape", "dtype", "min", "max", "mean")]
    rows += [(name, str(a.shape), str(a.dtype), *_stats(a)) for name, a in named]
    click.echo("\n".join(table(rows)))
    click.echo(f"\nran on {exe.device} in {elapsed_ms:.1f} ms")
    if output:
        # through a file object: np.savez given a name would append ".npz" to one that lacks it
        with open(output, "wb") as f:
            np.savez(f, **dict(named))
        click.echo(f"wrote {output}")
