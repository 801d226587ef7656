"""``aotc generate``: greedy decoding with a stateful artifact (a decoder that keeps its KV cache in a session)."""

from __future__ import annotations

import time

import click
import numpy as np

from aotc_cli.errors import debug_option
from aotc_cli.paths import require_file

HELP = """Decode greedily with ARTIFACT, a model that keeps state across calls (models/gpt2_decode.py).

The prompt is token ids, `--prompt 12,7,99` (one row; repeat --prompt for a batch of rows of one length). A session
holds the model's cache: one prefill call over the prompt, then one call per new token, each the argmax of the last
position's logits, up to --max-new-tokens or until every row produced --eos. The model takes `input_ids` (batch,
seq) and `cache_position` (seq,) (rename them with --ids-input and --position-input) and returns the logits first.
Prints each row's ids, then the calls' timing.
"""


def _row(text: str) -> list[int]:
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not comma-separated token ids", param_hint="--prompt") from None


@click.command("generate", help=HELP)
@click.argument("artifact", metavar="ARTIFACT")
@click.option("--prompt", "prompts", multiple=True, required=True, metavar="IDS", help="Token ids of one row: 1,2,3.")
@click.option("--max-new-tokens", default=32, show_default=True, type=click.IntRange(min=0))
@click.option("--eos", type=int, default=None, help="Stop a row at this token id (later ones are padded with it).")
@click.option(
    "--device", metavar="DEVICE", help="cpu, reference, cuda, cuda:N or interpret  [default: the best available]"
)
@click.option("--ids-input", default="input_ids", show_default=True, help="The model's token-id input.")
@click.option("--position-input", default="cache_position", show_default=True, help="The model's position input.")
@debug_option
def generate_command(
    artifact: str,
    prompts: tuple[str, ...],
    max_new_tokens: int,
    eos: int | None,
    device: str | None,
    ids_input: str,
    position_input: str,
) -> None:
    import aotc

    rows = [_row(p) for p in prompts]
    if not rows[0] or any(len(r) != len(rows[0]) for r in rows):
        raise click.BadParameter("every --prompt needs the same, non-zero number of ids", param_hint="--prompt")
    require_file(artifact)
    exe = aotc.load(artifact, device=device)
    steps: list[float] = []
    last = [time.perf_counter()]

    def timed(step: int, logits: np.ndarray) -> None:
        now = time.perf_counter()
        steps.append(now - last[0])
        last[0] = now

    with exe.session() as session:
        tokens = aotc.generate(
            session,
            np.array(rows, np.int64),
            max_new_tokens,
            eos_token_id=eos,
            ids_input=ids_input,
            position_input=position_input,
            on_step=timed,
        )
    for row in tokens:
        click.echo(",".join(str(t) for t in row))
    if steps:
        decode = steps[1:]
        per = f", then {1e3 * sum(decode) / len(decode):.2f} ms a token" if decode else ""
        click.echo(f"\nprefill {1e3 * steps[0]:.1f} ms{per} on {exe.device} ({len(rows)} row(s))")
