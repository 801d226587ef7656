"""``aotc export-triton``: an artifact -> a Triton Inference Server model repository (python backend)."""

from __future__ import annotations

import click

from aotc_cli.errors import debug_option
from aotc_cli.paths import require_file
from aotc_cli.serve_cmd import model_names


@click.command("export-triton")
@click.argument("artifact", metavar="ARTIFACT")
@click.option(
    "-o", "--output", "repo", required=True, metavar="REPO", help="The model repository folder (created if missing)."
)
@click.option("--name", metavar="NAME", help="The model's folder and name.  [default: the artifact's stem]")
@click.option(
    "--max-batch",
    type=click.IntRange(min=0),
    metavar="N",
    help="max_batch_size; 0: no batching.  [default: the batch dim's maximum]",
)
@click.option(
    "--device", type=click.Choice(["cpu", "cuda"]), help="Instance kind.  [default: Triton's, a GPU instance per GPU]"
)
@click.option(
    "--instances",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Instances per device (with --device).",
)
@click.option(
    "--queue-delay-us",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="dynamic_batching max_queue_delay_microseconds.",
)
@debug_option
def export_triton_command(
    artifact: str,
    repo: str,
    name: str | None,
    max_batch: int | None,
    device: str | None,
    instances: int,
    queue_delay_us: int,
) -> None:
    """Write REPO/NAME/config.pbtxt, REPO/NAME/1/model.py and REPO/NAME/1/model.aotc: a model repository that
    Triton Inference Server's python backend serves with aotc's runtime (which its Python environment needs:
    pip install aotc). Inputs and outputs keep the artifact's names; dynamic dims are -1; when every tensor has
    the batch dim first, max_batch_size is that dim's maximum and dynamic_batching is on."""
    path = require_file(artifact)
    (name,) = model_names((artifact,), (name,) if name else ())
    from aotc.serve.triton_repo import write_repository

    folder = write_repository(
        path, repo, name=name, max_batch=max_batch, device=device, instances=instances, queue_delay_us=queue_delay_us
    )
    click.echo(f"wrote {folder}/config.pbtxt, {folder}/1/model.py and {folder}/1/model.aotc")
