"""Bitwise and / or / xor / not on integer tensors as torch defines them (the Hugging Face sweep met CPM-Ant's
``context[:, None, :] | mask`` with an integer ``context``): torch's promotion (int | bool -> int, int32 | int64
-> int64, a Python int scalar keeps the tensor's dtype), negative values in two's complement, uint8 (carried in
int32) with its own ``~``, and bool kept logical. Against torch eager at two sizes of the dynamic dim, on the
cpu (onnxruntime), reference and interpret (generated kernels under the Triton interpreter) backends."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec

torch = torch_module()
nn = torch.nn
N = Dim("n", min=1, max=64)
DEVICES = ("cpu", "reference", "interpret")


class Bitwise(nn.Module):
    def forward(self, a: Any, b: Any, m: Any) -> Any:  # a: int32 (2, n), b: int64 (n,), m: bool (2, n)
        u = (a & 0xFF).to(torch.uint8)
        v = (b & 0x3F).to(torch.uint8)
        context = a[:, None, :] | (m[:, :, None] & m[:, None, :])  # CPM-Ant's attention mask: int | bool
        return (
            *(a & b, a | b, a ^ b),  # int32 with int64: int64
            *(a | m, m & a, m ^ a),  # int with bool: int
            *(m & m, m | ~m, m ^ m[:1], ~m),  # bool stays logical
            *(a & 6, 3 | a, a ^ -1, ~a, ~b),  # an int scalar keeps the tensor's dtype
            *(torch.bitwise_or(m, 1), torch.bitwise_xor(m, True), torch.bitwise_and(a, b[None])),
            *((~u).int(), (u ^ v).int(), (u | 0x80).int(), torch.bitwise_not(v).long()),
            context,
        )


def test_bitwise_ops_on_ints_and_bools_match_eager() -> None:
    specs = {"a": TensorSpec((2, N), "int32"), "b": TensorSpec((N,), "int64"), "m": TensorSpec((2, N), "bool")}
    compiled = aotc.compile(Bitwise(), specs)
    runs = {dev: aotc.load(compiled.artifact_bytes, device=dev) for dev in DEVICES}
    rng = np.random.default_rng(0)
    for n in (5, 37):
        a = rng.integers(-(2**31), 2**31, (2, n), dtype=np.int64).astype(np.int32)
        a[0, :3] = [-1, 0, 2**31 - 1]
        b = rng.integers(-(2**62), 2**62, (n,), dtype=np.int64)
        m = rng.random((2, n)) < 0.5
        with torch.no_grad():
            want = [t.numpy() for t in Bitwise()(*map(torch.from_numpy, (a, b, m)))]
        for dev, run in runs.items():
            got = run(a=a, b=b, m=m)
            assert len(got) == len(want)
            for i, (g, w) in enumerate(zip(got, want)):
                assert g.dtype == w.dtype and g.shape == w.shape, (dev, i, g.dtype, w.dtype, g.shape, w.shape)
                np.testing.assert_array_equal(g, w, err_msg=f"{dev}, output {i}, n={n}")
