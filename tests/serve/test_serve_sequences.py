"""Stateful serving (issue 29): ``aotc serve`` keeps one session per ``sequence_id`` for a model with state, spoken
to by ``tritonclient.http`` with ``sequence_id``/``sequence_start``/``sequence_end`` as for Triton's sequence batcher.
Two interleaved sequences decode exactly as two local sessions; each bad request is a 400 and the server goes on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import aotc
from aotc.serve.sequences import SequenceError, SequenceParams, Sequences, sequence_params

from .conftest import running_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from aotc_cli.loader import import_file

    m = import_file(ROOT / "models" / "gpt2_decode.py")
    model, inputs = m.build(vocab_size=128, n_positions=32, d_model=32, n_layer=1, n_head=2, max_batch=2)
    path = tmp_path_factory.mktemp("decoder") / "decoder.aotc"
    aotc.compile(model, inputs, options=aotc.CompileOptions(targets=())).save(path)
    return path


def _inputs(ids: np.ndarray, positions: np.ndarray) -> list[Any]:
    out = []
    for name, a in (("input_ids", ids), ("cache_position", positions)):
        t = httpclient.InferInput(name, list(a.shape), "INT64")
        t.set_data_from_numpy(a.astype(np.int64))
        out.append(t)
    return out


def _decode_remote(client: Any, seqs: dict[int, np.ndarray], steps: int) -> dict[int, list[int]]:
    """Prefill every sequence, then one token each in turn: their requests interleave."""
    tokens: dict[int, list[int]] = {s: [] for s in seqs}
    pos = {s: p.shape[1] for s, p in seqs.items()}
    for step in range(steps):
        for s, prompt in seqs.items():
            if step == 0:
                ids, positions = prompt, np.arange(prompt.shape[1])
            else:
                ids, positions = np.array([[tokens[s][-1]]]), np.array([pos[s]])
                pos[s] += 1
            r = client.infer(
                "decoder", _inputs(ids, positions), sequence_id=s, sequence_start=step == 0,
                sequence_end=step == steps - 1,
            )  # fmt: skip
            tokens[s].append(int(r.as_numpy("output")[0, -1].argmax()))
    return tokens


def test_interleaved_sequences_decode_as_local_sessions(decoder: Path, tmp_path: Path) -> None:
    prompts = {7: np.array([[3, 1, 4, 1, 5]]), 8: np.array([[2, 7, 1]])}
    local = aotc.load(decoder, device="cpu")
    want = {s: aotc.generate(local, p, 6)[0, p.shape[1] :].tolist() for s, p in prompts.items()}
    args = [decoder, "--device", "cpu", "--max-sequences", "2"]
    with running_server(args, tmp_path / "server.log") as server:
        client = httpclient.InferenceServerClient(server.url)
        assert _decode_remote(client, prompts, 6) == want

        def refused(seq: int, start: bool = False, ids: Any = None, positions: Any = None) -> str:
            ids = np.array([[1]]) if ids is None else ids
            positions = np.array([0]) if positions is None else positions
            with pytest.raises(InferenceServerException) as e:
                client.infer("decoder", _inputs(ids, positions), sequence_id=seq, sequence_start=start)
            assert str(e.value.status()) == "400", e.value.message()
            return e.value.message()

        assert "no live sequence 7" in refused(7)  # it ended
        assert "needs the parameter 'sequence_id'" in refused(0)  # tritonclient sends no id for 0
        client.infer("decoder", _inputs(np.array([[1]]), np.array([0])), sequence_id=21, sequence_start=True)
        client.infer("decoder", _inputs(np.array([[1]]), np.array([0])), sequence_id=22, sequence_start=True)
        assert "2 live sequences, its maximum" in refused(23, start=True)
        assert "index 40 in input 'cache_position'" in refused(21, positions=np.array([40]))
        # the refusals left sequence 21 usable, and the server serving
        r = client.infer("decoder", _inputs(np.array([[2]]), np.array([1])), sequence_id=21, sequence_end=True)
        assert r.as_numpy("output").shape == (1, 1, 128)
        assert client.is_server_ready()


def test_sequence_parameters_and_limits() -> None:
    assert sequence_params({"sequence_id": "a", "sequence_start": True}, "m") == SequenceParams("a", True, False)
    with pytest.raises(SequenceError, match="needs the parameter 'sequence_id'"):
        sequence_params({}, "m")
    with pytest.raises(SequenceError, match="'sequence_end' must be true or false"):
        sequence_params({"sequence_id": 3, "sequence_end": "yes"}, "m")

    class FakeSession:
        closed = False
        resets = 0

        def reset(self) -> None:
            self.resets += 1

        def close(self) -> None:
            self.closed = True

    opened: list[FakeSession] = []

    def open_session() -> FakeSession:
        opened.append(FakeSession())
        return opened[-1]

    seqs = Sequences(open_session, "m", max_sequences=2, idle_timeout_s=0.05)

    async def go() -> list[int]:
        order: list[int] = []
        await seqs.run(SequenceParams(1, True, False), lambda s: None)
        calls = [seqs.run(SequenceParams(1, False, False), lambda s, i=i: order.append(i)) for i in range(5)]
        await asyncio.gather(*calls)
        await asyncio.sleep(0.1)
        await seqs.run(SequenceParams(2, True, True), lambda s: None)  # expires 1, and ends itself
        return order

    assert asyncio.run(go()) == [0, 1, 2, 3, 4]  # one sequence's requests in arrival order
    assert len(seqs) == 0 and all(s.closed for s in opened)
