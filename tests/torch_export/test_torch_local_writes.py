"""In-place writes into fresh tensors (inplace.py, local_writes.py): the Translator follows them itself, so torch's
decomposition pass is skipped, and every read sees the writes before it as torch's memory would. Each model
against torch eager at two sizes of its dynamic dim; the plan checked on its own, including what it leaves to
torch's decomposition (and that those still match)."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec
from aotc.torch_export.inplace import functional_inplace, inplace_plan
from aotc.torch_export.module import decompose

torch = torch_module()
nn = torch.nn
B = Dim("b", min=2, max=64)


class ThroughSelect(nn.Module):
    def forward(self, x: Any) -> Any:
        y = x * 2
        y[:, 0] = 0.0
        return y + 1


class ForwardSubstitution(nn.Module):
    """Hugging Face's gated-delta-rule chunk loop (Qwen3.5, Qwen3-Next): each row of ``a`` written from the rows
    above it, with a view taken before the writes and a transpose after them."""

    def forward(self, x: Any) -> Any:
        a = -(x @ x.transpose(-1, -2)).tril(-1)
        first = a[:, 0, :]  # a view taken before the writes: torch's shows them
        for i in range(1, a.shape[-1]):
            row = a[..., i, :i].clone()
            sub = a[..., :i, :i].clone()
            a[..., i, :i] = row + (row.unsqueeze(-1) * sub).sum(-2)
        out = torch.zeros_like(x)
        for i in range(x.shape[1]):
            out[:, i] = x[:, i] * 2 + first.sum()
            out[:, i].add_(1.0)
        return a + 1, out.transpose(1, 2) * 1, first * 1


class WrittenAfterARead(nn.Module):
    def forward(self, x: Any) -> Any:
        y = x.clone()
        before = y * 2  # reads y before the writes
        y.add_(1)
        head = y[0]
        y[0] = 5.0
        return y + before, head + 0


class CastOnWrite(nn.Module):
    def forward(self, x: Any) -> Any:
        y = torch.zeros(x.shape[0], 4, dtype=torch.int64)
        y[:, 1] = (x[:, 0] * 10).to(torch.int64)  # written in y's dtype
        z = torch.ones_like(x)
        z[:, 2:5].fill_(torch.tensor(3.5))
        return y, z


class ThroughReshape(nn.Module):
    def forward(self, x: Any) -> Any:
        y = x * 1
        flat = y.view(-1)  # a write through a reshape: torch's decomposition runs it
        flat[0] = 7.0
        return y * 2


MODELS = {
    ThroughSelect: (6,),
    ForwardSubstitution: (5, 5),
    WrittenAfterARead: (3,),
    CastOnWrite: (6,),
    ThroughReshape: (4,),
}


def _export(model: nn.Module, x: np.ndarray) -> Any:
    return torch.export.export(model, (torch.from_numpy(x),), dynamic_shapes=({0: torch.export.Dim("b", max=64)},))


def test_local_writes_match_eager_at_two_batch_sizes() -> None:
    rng = np.random.default_rng(0)
    for cls, rest in MODELS.items():
        model = cls()
        compiled = aotc.compile(model, {"x": TensorSpec((B, *rest))})
        for b in (2, 7):
            x = rng.standard_normal((b, *rest)).astype(np.float32)
            got = compiled(x=x)
            with torch.no_grad():
                want = model(torch.from_numpy(x.copy()))
            got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
            assert len(got) == len(want), cls.__name__
            for g, w in zip(got, want):
                assert np.asarray(g).dtype == w.numpy().dtype, cls.__name__
                np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-5, atol=1e-5, err_msg=cls.__name__)


def test_the_plan_follows_fresh_tensors_and_leaves_the_rest_to_torch() -> None:
    for cls in (ThroughSelect, ForwardSubstitution, WrittenAfterARead, CastOnWrite):
        ep = _export(cls(), np.ones((4, *MODELS[cls]), np.float32))
        plan = inplace_plan(ep.graph)
        assert plan is not None and plan.local_roots, cls.__name__
        assert functional_inplace(ep.graph) is None  # not twins: other nodes see these writes
        assert decompose(ep) is ep, cls.__name__  # torch's decomposition pass skipped
    ep = _export(ThroughReshape(), np.ones((4, *MODELS[ThroughReshape]), np.float32))
    assert inplace_plan(ep.graph) is None
    assert decompose(ep) is not ep


def test_an_alias_before_the_last_write_that_the_translator_cannot_follow_goes_to_torch() -> None:
    class TransposedEarly(nn.Module):
        def forward(self, x: Any) -> Any:
            y = x * 1
            t = y.t()  # taken before the write below, and read after it: torch's shows the write
            y[0] = 0.0
            return t * 1

    model = TransposedEarly()
    x = np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32)
    assert inplace_plan(torch.export.export(model, (torch.from_numpy(x),)).graph) is None
    got = aotc.compile(model, {"x": TensorSpec((3, 3))})(x=x)
    with torch.no_grad():
        np.testing.assert_allclose(np.asarray(got), model(torch.from_numpy(x.copy())).numpy(), rtol=1e-6)


class ReassignedBuffer(nn.Module):
    """CTRL: ``self.pos_encoding = self.pos_encoding.to(device, dtype)`` on every call sets the buffer to itself."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.table = nn.Buffer(torch.arange(64.0).reshape(16, 4), persistent=False)
        self.scale = scale

    def forward(self, x: Any) -> Any:
        same = self.table.to(device=x.device, dtype=x.dtype)
        self.table = same if self.scale == 1 else same * self.scale
        return x + self.table[: x.shape[0]]


def test_a_buffer_set_to_itself_is_no_state_and_one_set_to_a_new_value_is() -> None:
    from aotc.torch_export.state_writes import written_placeholders

    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    export = torch.export.export
    assert written_placeholders(export(ReassignedBuffer(), (torch.from_numpy(x),))) == set()
    assert len(written_placeholders(export(ReassignedBuffer(scale=2.0), (torch.from_numpy(x),)))) == 1
    model = ReassignedBuffer()
    compiled = aotc.compile(model, {"x": TensorSpec((Dim("b", min=2, max=16), 4))})
    for b in (2, 9):  # called directly: a model with state could only run through a session
        x = np.random.default_rng(b).standard_normal((b, 4)).astype(np.float32)
        with torch.no_grad():
            np.testing.assert_allclose(np.asarray(compiled(x=x)), model(torch.from_numpy(x)).numpy(), rtol=1e-6)
