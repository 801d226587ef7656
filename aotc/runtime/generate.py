"""``generate``: the greedy token loop over a decoder that keeps its cache in a session (models/gpt2_decode.py).

The loop is the one Hugging Face's ``generate`` runs with ``do_sample=False``: a prefill call over the prompt at
positions ``0 .. len-1``, then one call per new token at the next position, each taking the argmax of the last
position's logits. With ``eos_token_id``, a row that produced it is finished: it is fed (and gets) ``pad_token_id``
(the eos id unless given) from then on, and the loop stops once every row is finished.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from aotc.errors import AotcError, GuardError


def generate(
    model: Any,
    input_ids: Any,
    max_new_tokens: int,
    *,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    ids_input: str = "input_ids",
    position_input: str = "cache_position",
    logits_output: int = 0,
    on_step: Callable[[int, np.ndarray], None] | None = None,
) -> np.ndarray:
    """Greedy decoding: ``input_ids`` (batch, prompt) followed by up to ``max_new_tokens`` new tokens per row.

    ``model``: a Session (reset first, so its sequence starts over) or an Executable (a session is opened for the
    call and closed after it). The model takes the token ids as input ``ids_input`` (batch, seq) and their positions
    as ``position_input`` (seq,), and returns the logits (batch, seq, vocab) as its output ``logits_output``.
    ``on_step(step, logits)`` sees each call's last-position logits (batch, vocab), ``step`` 0 being the prefill's.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise AotcError(f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
    ids = np.asarray(input_ids)
    if ids.ndim != 2 or ids.dtype.kind not in "iu" or ids.shape[1] == 0:
        raise GuardError(
            f"input_ids must be a (batch, prompt) array of ints with a non-empty prompt, got {ids.dtype}{list(ids.shape)}"
        )
    ids = ids.astype(np.int64)
    session, owned = _session(model)
    try:
        session.reset()
        pad = eos_token_id if pad_token_id is None else pad_token_id
        done = np.zeros(ids.shape[0], bool)
        tokens: list[np.ndarray] = []
        feed_ids, start = ids, 0
        for step in range(max_new_tokens):
            positions = np.arange(start, start + feed_ids.shape[1], dtype=np.int64)
            logits = session.run({ids_input: feed_ids, position_input: positions})[logits_output]
            last = np.asarray(logits)[:, -1]
            if on_step is not None:
                on_step(step, last)
            nxt = last.argmax(-1).astype(np.int64)
            if eos_token_id is not None:
                nxt = np.where(done, pad, nxt)
                done |= nxt == eos_token_id
            tokens.append(nxt)
            if eos_token_id is not None and done.all():
                break
            start += feed_ids.shape[1]
            feed_ids = nxt[:, None]
        new = np.stack(tokens, axis=1) if tokens else np.zeros((ids.shape[0], 0), np.int64)
        return np.concatenate([ids, new], axis=1)
    finally:
        if owned:
            session.close()


def _session(model: Any) -> tuple[Any, bool]:
    if hasattr(model, "run") and hasattr(model, "reset"):
        return model, False
    opener = getattr(model, "session", None)
    if opener is None:
        raise AotcError(f"generate needs a Session or an Executable of a stateful model, got {type(model).__name__}")
    return opener(), True
