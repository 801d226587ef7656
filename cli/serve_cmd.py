"""``aotc serve``: artifacts behind the Open Inference Protocol (v2), on KServe's Python SDK."""

from __future__ import annotations

import re
from pathlib import Path

import click

from aotc_cli.errors import debug_option
from aotc_cli.paths import require_file
from aotc_cli.user_error import UserError

HELP = """Serve each ARTIFACT over the Open Inference Protocol (v2): the REST and gRPC
endpoints of Triton Inference Server, KServe and Seldon MLServer, so their clients
(tritonclient, curl) work unchanged. Needs `pip install 'aotc[serve]'`.

REST: /v2/health/live, /v2/health/ready, /v2/models/NAME (metadata: tensor names,
v2 datatypes, -1 for dynamic dims, each dim's range in the parameters),
/v2/models/NAME/ready, POST /v2/models/NAME/infer (JSON or binary tensors) and
Prometheus metrics at /metrics; gRPC on --grpc-port. Concurrent requests that
share every non-batch dim run as one call along the batch dim (--max-batch 1
turns this off), of the size, at most --max-batch, that has served rows fastest
(--fixed-batch: always up to --max-batch). A request the model refuses is a
400 with aotc's message.
"""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def model_names(artifacts: tuple[str, ...], names: tuple[str, ...]) -> list[str]:
    """One name per artifact: ``--name`` values in order, else each file's stem."""
    if names and len(names) != len(artifacts):
        raise UserError(f"got {len(names)} --name for {len(artifacts)} artifacts; give one per artifact, in order")
    chosen = list(names) or [Path(a).stem for a in artifacts]
    for name in chosen:
        if not _NAME.fullmatch(name):
            raise UserError(f"model name {name!r} can't be a URL path segment; use letters, digits, '_', '.', '-'")
    dup = sorted({n for n in chosen if chosen.count(n) > 1})
    if dup:
        raise UserError(f"two artifacts would be served as {', '.join(map(repr, dup))}; give each a --name")
    return chosen


@click.command("serve", help=HELP)
@click.argument("artifacts", nargs=-1, required=True, metavar="ARTIFACT...")
@click.option(
    "--name",
    "names",
    multiple=True,
    metavar="NAME",
    help="Model name, one per artifact in order.  [default: the file's stem]",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (0.0.0.0: every interface).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="REST port.")
@click.option(
    "--grpc-port", default=8081, show_default=True, type=click.IntRange(0, 65535), help="gRPC port; 0: no gRPC."
)
@click.option("--device", metavar="DEVICE", help="cpu, cuda, cuda:N or interpret  [default: the best available]")
@click.option(
    "--threads",
    type=click.IntRange(min=0),
    metavar="N",
    help="onnxruntime's intra-op threads per model on the cpu device (0: its default, one per physical core).",
)
@click.option(
    "--max-batch",
    type=click.IntRange(min=1),
    metavar="N",
    help="Most rows in one batched call; 1: no batching.  [default: the batch dim's maximum]",
)
@click.option(
    "--batch-timeout-ms",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    metavar="T",
    help="How long an idle model waits for a batch to fill.",
)
@click.option(
    "--fixed-batch",
    is_flag=True,
    help="Fill every batch up to --max-batch, rather than to the size measured fastest per request shape "
    "(on a CPU the largest batch is often slower per row).",
)
@click.option(
    "--batch-dim", metavar="NAME", help="The dim to batch along.  [default: the inputs' shared leading dynamic dim]"
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    metavar="K",
    help="REST worker processes, each loading the artifacts.",
)
@click.option(
    "--max-body-mb",
    default=64.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Largest request body taken (413 above it).",
)
@click.option("--access-log", is_flag=True, help="Log a line per HTTP request (uvicorn's access log).")
@click.option(
    "--replicas",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="N",
    help="Run each model as N Ray Serve replicas behind the same endpoints (pip install 'aotc[ray]').",
)
@click.option(
    "--cpus-per-replica",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="With --replicas: Ray's num_cpus per replica.",
)
@click.option(
    "--gpus-per-replica",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="With --replicas: Ray's num_gpus per replica (1 on GPU machines).",
)
@click.option(
    "--trusted-key",
    "trusted_keys",
    multiple=True,
    metavar="KEY.pub",
    help="Serve each ARTIFACT only if it is signed by this Ed25519 public key (repeatable: any of them). On cuda "
    "without one, a warning at start says that the files' cubins and PTX run unchecked.",
)
@click.option(
    "--max-sequences",
    default=64,
    show_default=True,
    type=click.IntRange(min=1),
    help="A model that keeps state (a decoder's cache): the most sequences live at once (sequence_id).",
)
@click.option(
    "--sequence-idle-s",
    default=600.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="A model that keeps state: seconds after which an idle sequence is closed.",
)
@debug_option
def serve_command(
    artifacts: tuple[str, ...],
    names: tuple[str, ...],
    host: str,
    port: int,
    grpc_port: int,
    device: str | None,
    threads: int | None,
    max_batch: int | None,
    batch_timeout_ms: float,
    fixed_batch: bool,
    batch_dim: str | None,
    workers: int,
    max_body_mb: float,
    access_log: bool,
    replicas: int,
    cpus_per_replica: float,
    gpus_per_replica: float,
    trusted_keys: tuple[str, ...],
    max_sequences: int,
    sequence_idle_s: float,
) -> None:
    for a in artifacts:
        require_file(a)
    chosen = model_names(artifacts, names)
    keys = [str(require_file(k, "--trusted-key").resolve()) for k in trusted_keys]
    if replicas and workers > 1:
        raise UserError("--workers applies to the local server; with --replicas, Ray Serve runs the replicas")
    if replicas and fixed_batch:
        raise UserError("--fixed-batch applies to the local server; with --replicas, Ray Serve's batches are fixed")
    try:
        from aotc.serve.model import AotcModel
        from aotc.serve.server import configure_logging, serve
    except ImportError as e:
        raise UserError(f"aotc serve needs KServe's SDK ({e}): pip install 'aotc[serve]'") from None
    configure_logging()
    settings = dict(device=device, max_batch=max_batch, batch_timeout_ms=batch_timeout_ms, batch_dim=batch_dim)
    # passed to aotc.runtime.load by every process that loads the artifact (workers, Ray replicas)
    load_options = {k: v for k, v in (("trusted_keys", keys), ("threads", threads)) if v}
    if load_options:
        settings["load_options"] = load_options
    if replicas or workers > 1:
        _refuse_stateful(artifacts, "--replicas" if replicas else "--workers")
    if replicas:
        try:
            from aotc.serve.ray_serve import deploy
        except ImportError as e:
            raise UserError(f"--replicas needs Ray Serve ({e}): pip install 'aotc[ray]'") from None
        models = [
            deploy(
                path, name=name, num_replicas=replicas, num_cpus=cpus_per_replica, num_gpus=gpus_per_replica, **settings
            )
            for path, name in zip(artifacts, chosen)
        ]
    else:
        sequences = dict(max_sequences=max_sequences, sequence_idle_s=sequence_idle_s)
        models = [
            AotcModel(name, path, adaptive_batch=not fixed_batch, **settings, **sequences)
            for path, name in zip(artifacts, chosen)
        ]
        for m in models:
            m.load()
    notice = unchecked_gpu_notice(
        [m.exe.device for m in models] if not replicas else [_replica_device(device, gpus_per_replica)], keys
    )
    if notice:
        click.echo(notice, err=True)
    serve(
        models,
        host=host,
        http_port=port,
        grpc_port=grpc_port or None,
        workers=workers,
        max_body_bytes=int(max_body_mb * (1 << 20)),
        access_log=access_log,
    )


def unchecked_gpu_notice(devices: list[str | None], trusted_keys: list[str]) -> str | None:
    """The one line a server on cuda without a trusted key prints at start (None on other devices or with a key): a
    reader proves a file's plans, grids and each pointer's bounds, but not the machine code its cubins and PTX hold,
    which the GPU runs as given; only a required signature vouches for that code."""
    if trusted_keys or not any(d and d.startswith("cuda") for d in devices):
        return None
    return (
        "warning: serving on cuda without --trusted-key: the cubins and PTX of the files served run on the GPU "
        "unchecked (no reader can verify machine code); --trusted-key KEY.pub serves only files signed by that key"
    )


def _replica_device(device: str | None, gpus_per_replica: float) -> str | None:
    """The device a Ray replica loads on, as far as this process can tell: ``--device``, else cuda where each
    replica is given a GPU (the best available device there), else unknown."""
    if device is None and gpus_per_replica > 0:
        return "cuda"
    return device


def _refuse_stateful(artifacts: tuple[str, ...], option: str) -> None:
    """Ray Serve sends each request to any replica (its multiplexing prefers, but does not promise, the replica that
    served an id before), and the REST workers share one port, so a sequence's next request could reach a process
    without its state."""
    from aotc.artifact import read_artifact

    for a in artifacts:
        if read_artifact(a, verify_weights=False).variants[0].graph.states:
            raise UserError(
                f"{a} keeps state across requests, which {option} could route to different processes: serve it "
                "from one process (its sequences' sessions live there), or behind Triton's sequence batcher "
                "(aotc export-triton)"
            )
