"""The torch.export importer's contract: entry points (a torch.nn.Module with aotc input specs, an ExportedProgram,
``aotc compile model.py``), names, symbols and guards, the errors a PyTorch user meets (one line naming the op or
dim and the model's source line) and the artifact of a torch model being like any other."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec
from aotc.ir.ops import Op
from aotc.ir.types import Attrs, Value
from aotc.torch_export import import_torch, is_torch_model
from aotc.torch_export.table import ATEN, decomposition_table

torch = torch_module()
nn = torch.nn
F32 = np.float32
ROWS = {"x": TensorSpec((Dim("batch", min=1, max=64), 8))}


def _eager(module: Any, **feeds: np.ndarray) -> Any:
    with torch.no_grad():
        return module(**{k: torch.from_numpy(v) for k, v in feeds.items()})


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.register_buffer("shift", torch.linspace(-1, 1, 4))

    def forward(self, x: Any, scale: Any) -> dict[str, Any]:
        y = self.fc(x) * scale + self.shift
        return {"logits": y, "probs": y.softmax(-1)}


def test_a_module_compiles_with_aotc_specs_and_keeps_its_names() -> None:
    torch.manual_seed(0)
    net = Net().eval()
    batch = Dim("batch", min=1, max=64)
    compiled = aotc.compile(net, {"x": TensorSpec((batch, 8)), "scale": TensorSpec((batch, 1))})
    assert compiled.input_names == ("x", "scale")
    x, scale = np.random.default_rng(0).standard_normal((5, 8)).astype(F32), np.full((5, 1), 2.0, F32)
    out = compiled(x=x, scale=scale)
    expected = _eager(net, x=x, scale=scale)
    assert list(out) == ["logits", "probs"]  # a dict output keeps its keys
    for k in out:
        np.testing.assert_allclose(out[k], expected[k].numpy(), rtol=1e-5, atol=1e-6)
    assert sorted(compiled.graph.constants) == ["fc.bias", "fc.weight", "shift"]  # parameters and buffers by name
    assert [(s.name, s.min, s.max) for s in compiled.graph.symbols] == [("batch", 1, 64)]


def test_an_exported_program_brings_its_named_and_derived_dims() -> None:
    from torch.export import Dim as TDim
    from torch.export import export

    class Pair(nn.Module):
        def forward(self, x: Any, y: Any) -> Any:
            return torch.cat([x, y], 0).sum(0), x[:, :2]

    b = TDim("rows", min=1, max=32)
    ep = export(Pair(), (torch.randn(8, 3), torch.randn(16, 3)), dynamic_shapes={"x": {0: b}, "y": {0: 2 * b}})
    compiled = aotc.compile(ep)
    assert [(s.name, s.min, s.max) for s in compiled.graph.symbols] == [("rows", 1, 32)]  # the user's name
    assert [str(v.type) for v in compiled.graph.inputs] == ["float32[rows, 3]", "float32[2*rows, 3]"]
    x, y = np.ones((3, 3), F32), np.full((6, 3), 2.0, F32)
    total, head = compiled(x=x, y=y)
    expected = ep.module()(torch.from_numpy(x), torch.from_numpy(y))
    np.testing.assert_allclose(total, expected[0].numpy())
    np.testing.assert_allclose(head, expected[1].numpy())
    with pytest.raises(aotc.GuardError, match=r"input 'y' dim 0 = 5, expected 2\*rows = 6"):
        compiled(x=x, y=y[:5])


def test_an_exported_program_dim_without_a_max_is_refused_saying_how_to_give_one() -> None:
    from torch.export import Dim as TDim
    from torch.export import export

    ep = export(nn.ReLU(), (torch.randn(8, 3),), dynamic_shapes=({0: TDim("n")},))
    with pytest.raises(aotc.ShapeError, match=r"dim 'n' \(input 'input' dim 0\) has no finite max.*Dim\('n'.*max="):
        aotc.compile(ep)


def test_unnamed_torch_dims_are_named_by_their_input_position() -> None:
    from torch.export import Dim as TDim
    from torch.export import export

    ep = export(nn.ReLU(), (torch.randn(8, 3),), dynamic_shapes=({0: TDim.DYNAMIC(max=50)},))
    assert [(s.name, s.max) for s in import_torch(ep).symbols] == [("input_0", 50)]


class Quarters(nn.Module):
    def forward(self, x: Any) -> Any:
        return x.reshape(x.shape[0] // 4, 4, 8).sum(1)


def test_a_floordiv_reshape_becomes_a_multiple_of_guard_checked_at_run_time() -> None:
    compiled = aotc.compile(Quarters(), ROWS)
    (batch,) = compiled.graph.symbols
    assert batch.multiple_of == 4
    x = np.random.default_rng(0).standard_normal((12, 8)).astype(F32)
    np.testing.assert_allclose(compiled(x=x), _eager(Quarters(), x=x).numpy(), rtol=1e-6)
    with pytest.raises(aotc.GuardError, match=r"input 'x' dim 0 \(batch\) = 10 is not a multiple of 4"):
        compiled(x=np.zeros((10, 8), F32))


def test_a_relational_guard_torch_records_is_kept() -> None:
    class Branch(nn.Module):
        def forward(self, x: Any) -> Any:
            return x * 2 if x.shape[0] > 16 else x + 1

    from aotc.frontend.pinned import PinnedDimWarning

    # traced at batch 8: the "x + 1" side holds for batch <= 16, narrower than declared, which compile says
    with pytest.warns(PinnedDimWarning, match=r"dim 'batch' is declared dynamic over \[1, 64\], but .* batch <= 16"):
        compiled = aotc.compile(Branch(), ROWS)
    assert [(s.name, s.max) for s in compiled.graph.symbols] == [("batch", 16)]
    np.testing.assert_array_equal(compiled(x=np.zeros((3, 8), F32)), np.ones((3, 8), F32))
    with pytest.raises(aotc.GuardError, match=r"batch\) = 17 is outside \[1, 16\]"):
        compiled(x=np.zeros((17, 8), F32))


def test_a_guard_aotc_cannot_express_is_refused_not_dropped() -> None:
    from torch.export import Dim as TDim
    from torch.export import export

    ep = export(nn.ReLU(), (torch.randn(8, 3),), dynamic_shapes=({0: TDim("n", max=64)},))
    ep._guards_code = [*getattr(ep, "_guards_code", []), "L['input'].size()[0] ** 2 >= 4"]
    with pytest.raises(aotc.TraceError, match=r"cannot express.*refusing rather than dropping it"):
        aotc.compile(ep)


# -- errors a PyTorch user meets -------------------------------------------------------------------------------


class Spectrum(nn.Module):
    def forward(self, x: Any) -> Any:
        return torch.fft.irfft(x)


class NonZero(nn.Module):
    def forward(self, x: Any) -> Any:
        return x.nonzero()


class Specialized(nn.Module):
    def forward(self, x: Any) -> Any:
        if x.shape[0] == 8:
            return x * 2
        return x


class Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(8))

    def forward(self, x: Any) -> Any:
        self.calls.add_(1)
        return x + self.calls


def test_a_buffer_the_module_writes_is_a_state() -> None:
    """A module that writes its buffer keeps it across calls: a state of a session (issue 29), no longer refused."""
    c = aotc.compile(Counter(), {"x": TensorSpec((8,), "float32")}, options=aotc.CompileOptions(targets=()))
    assert [s.name for s in c.graph.states] == ["calls"]
    s = c.session()
    s(x=np.zeros(8, np.float32))
    np.testing.assert_array_equal(s(x=np.zeros(8, np.float32)), np.full(8, 2.0, np.float32))


class WritesInput(nn.Module):
    def forward(self, x: Any) -> Any:
        x.mul_(2)
        return x + 1


HERE = Path(__file__).name


@pytest.mark.parametrize(
    ("module", "error", "message"),
    [
        (
            Spectrum,
            aotc.UnsupportedError,
            rf"{HERE}:\d+: aten\._fft_c2r\.default is not supported by aotc \(no supported op shares its name",
        ),
        (NonZero, aotc.TraceError, rf"{HERE}:\d+: aten\.nonzero\.default gives a data-dependent shape"),
        (Specialized, aotc.TraceError, rf"{HERE}:\d+: dim 'batch' .* specialized it to the constant 8"),
        (WritesInput, aotc.UnsupportedError, r"mutates input 'x'"),
    ],
)
def test_errors_are_one_line_naming_the_op_or_dim_and_the_source_line(module: Any, error: Any, message: str) -> None:
    with pytest.raises(error, match=message) as info:
        aotc.compile(module(), ROWS)
    assert "\n" not in str(info.value)


def test_a_value_dependent_size_is_refused_at_its_line() -> None:
    class Count(nn.Module):
        def forward(self, x: Any) -> Any:
            return x[: int(x.sum())]

    with pytest.raises(aotc.TraceError, match=rf"{HERE}:\d+: the model's shapes depend on tensor values"):
        aotc.compile(Count(), ROWS)


def test_example_sizes_avoid_0_and_1_and_a_dim_that_can_only_be_1_says_why() -> None:
    from aotc.torch_export.module import example_dims

    dims = example_dims({"x": TensorSpec((Dim("a", 1, 64), Dim("b", 1, 64), Dim("c", 1, 3, multiple_of=1)))})
    hints = [d.hint for d in dims["x"].shape]
    assert all(h >= 2 for h in hints) and len(set(hints)) == 3
    with pytest.raises(aotc.TraceError, match=r"example size 1, which torch specializes"):
        aotc.compile(nn.ReLU(), {"input": TensorSpec((Dim("one", 1, 1), 8))})


def test_a_module_in_training_mode_compiles_for_inference_and_keeps_its_mode() -> None:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.BatchNorm1d(8)).train()
    compiled = aotc.compile(module, {"input": ROWS["x"]})  # Sequential.forward(input): inputs bind by name
    assert module.training
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(F32)
    with torch.no_grad():
        expected = module.eval()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(compiled(input=x), expected, rtol=1e-5, atol=1e-6)


def test_training_mode_dropout_is_refused() -> None:
    class Drop(nn.Module):
        def forward(self, x: Any) -> Any:
            return nn.functional.dropout(x, 0.5, training=True)

    with pytest.raises(aotc.TraceError, match=rf"{HERE}:\d+: dropout in training mode: call model.eval\(\)"):
        aotc.compile(Drop(), ROWS)


# -- the translation table ----------------------------------------------------------------------------------------


def test_every_table_row_names_a_real_op_and_the_kept_ops_are_not_decomposed() -> None:
    import operator

    for key in ATEN:
        ns, name, overload = key.split(".") if key.count(".") == 2 else (*key.split("."), None)
        if ns == "aten":
            assert hasattr(getattr(torch.ops.aten, name), overload), key
        else:
            assert hasattr({"operator": operator, "torch": torch}[ns], name), key
    table = decomposition_table()
    kept = {str(op) for op in table}
    for op in ("scaled_dot_product_attention.default", "linear.default", "layer_norm.default", "gelu.default",
               "conv2d.default", "batch_norm.default", "silu.default", "embedding.default"):  # fmt: skip
        assert f"aten.{op}" not in kept
    assert "aten.addcmul.default" in kept and "aten.hardshrink.default" in kept  # not in the table: decomposed


def test_in_place_ops_translate_directly_unless_a_view_sees_the_write() -> None:
    from torch.export import Dim as TDim
    from torch.export import export

    from aotc.torch_export.inplace import functional_inplace

    class Block(nn.Module):
        def forward(self, x: Any) -> Any:
            y = x * 2
            y += x
            return y.relu_()

    class ThroughView(nn.Module):
        def forward(self, x: Any) -> Any:
            y = x * 2
            y[:, 0] = 0.0
            return y + 1

    dyn = ({0: TDim("b", max=64)},)
    assert functional_inplace(export(Block(), (torch.randn(8, 8),), dynamic_shapes=dyn).graph) == {"add_", "relu_"}
    assert functional_inplace(export(ThroughView(), (torch.randn(8, 8),), dynamic_shapes=dyn).graph) is None
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(F32)
    for module in (Block(), ThroughView()):
        got = aotc.compile(module, ROWS)(x=x)
        np.testing.assert_allclose(got, _eager(module, x=x.copy()).numpy(), rtol=1e-6)


# -- the artifact is like any other ---------------------------------------------------------------------------------


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: Any) -> Any:
        return torch.relu(self.fc(x))


def test_the_artifact_inspects_exports_to_onnx_and_runs_on_every_backend(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("triton")
    from aotc.artifact.describe import describe
    from aotc.artifact.reader import read_artifact
    from aotc.lowering.options import CompileOptions
    from aotc.onnx import export_artifact

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
    from fake_cuda import FakeDriver

    from aotc.runtime import Executable
    from aotc.runtime.backends.cuda import CudaBackend

    torch.manual_seed(0)
    module = Tiny().eval()
    compiled = aotc.compile(module, ROWS, options=CompileOptions(targets=("sm_80",)))
    art = read_artifact(compiled.artifact_bytes)
    info = describe(art)
    assert [i["name"] for i in info["inputs"]] == ["x"] and info["kernels"]
    path = tmp_path / "tiny.onnx"
    export_artifact(compiled.artifact_bytes, str(path))
    onnx.checker.check_model(onnx.load(str(path)))
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(F32)
    expected = _eager(module, x=x).numpy()
    for device in ("cpu", "interpret"):
        np.testing.assert_allclose(aotc.load(compiled.artifact_bytes, device=device)(x=x), expected, rtol=1e-5)
    fake = FakeDriver(capability=(8, 0))
    fake.register(art.variants[0].plan, art.kernels)
    with Executable(art, CudaBackend(driver=fake)) as exe:
        np.testing.assert_allclose(exe(x=x), expected, rtol=1e-5, atol=1e-6)


def test_the_runtime_loads_a_torch_models_artifact_without_importing_torch(tmp_path: Path) -> None:
    path = tmp_path / "tiny.aotc"
    aotc.compile(Tiny().eval(), ROWS).save(path)
    code = (
        "import sys, json, numpy as np, aotc.runtime as rt\n"
        f"y = rt.load({str(path)!r}, device='cpu')(x=np.ones((2, 8), np.float32))\n"
        "print(json.dumps([list(y.shape), 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [[2, 4], False]


def test_aotc_compile_accepts_a_build_returning_a_torch_module(tmp_path: Path) -> None:
    pytest.importorskip("click")
    from click.testing import CliRunner

    from aotc_cli.main import cli

    (tmp_path / "net.py").write_text(
        "import torch\nfrom aotc import Dim, TensorSpec\n\n\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()\n"
        "    return net, {'input': TensorSpec((Dim('batch', min=1, max=32), 8))}\n"
    )
    out = tmp_path / "net.aotc"
    result = CliRunner().invoke(cli, ["compile", str(tmp_path / "net.py"), "-o", str(out), "--target", "none"])
    assert result.exit_code == 0, result.output
    exe = aotc.load(out, device="cpu")
    assert exe(input=np.ones((3, 8), F32)).shape == (3, 4)


def test_torch_models_are_recognized_without_importing_torch_for_others() -> None:
    assert is_torch_model(nn.Linear(2, 2)) and not is_torch_model(lambda x: x)


def test_readme_pytorch_example_runs_as_printed() -> None:
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## PyTorch models") :]
    code = re.search(r"```python\n(.+?)```", section, re.S).group(1)
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["out"]["probs"].shape == (3, 4)
    np.testing.assert_allclose(namespace["out"]["probs"].sum(-1), 1.0, rtol=1e-6)


def test_a_weight_shared_by_two_modules_is_stored_once() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(16, 8)
            self.head = nn.Linear(8, 16, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, ids: Any) -> Any:
            return self.head(self.embed(ids))

    torch.manual_seed(0)
    module = Tied().eval()
    compiled = aotc.compile(module, {"ids": TensorSpec((Dim("n", min=1, max=32),), "int64")})
    assert list(compiled.graph.constants) == ["embed.weight"]
    ids = np.array([1, 5, 7], np.int64)
    np.testing.assert_allclose(compiled(ids=ids), _eager(module, ids=ids).numpy(), rtol=1e-5, atol=1e-6)


def test_the_compiler_imports_torch_only_for_a_torch_model() -> None:
    code = "import sys, aotc, aotc.compiler, aotc.torch_export; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_export_onnx_writes_no_initializer_that_no_node_reads(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Batch norm's num_batches_tracked buffer is in torch's program but no node reads it: the graph and the
    exported file leave it out (onnxruntime warns about each unread initializer) and still computes what torch does."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    graph = import_torch(net, {"input": TensorSpec((Dim("batch", min=1, max=4), 3, 8, 8))})
    assert "num_batches_tracked" in str(torch.export.export(net, (torch.ones(2, 3, 8, 8),)).graph)
    assert "1.num_batches_tracked" not in graph.constants  # read by no node: the importer stores none of it
    # a graph that does hold a constant no node reads (as the importer once kept this one): the file still leaves it out
    kept = next(n for n in graph.nodes if n.op is Op.CONSTANT)
    fresh = max(v.id for n in graph.nodes for v in (*n.inputs, *n.outputs)) + 1
    unread = kept.replace(outputs=(Value(fresh, kept.outputs[0].type),), attrs=Attrs({"name": "1.num_batches_tracked"}))
    spare = {"1.num_batches_tracked": graph.constants[kept.attrs["name"]]}
    graph = graph.replace(nodes=(unread, *graph.nodes), constants={**graph.constants, **spare})
    aotc.onnx.export_graph(graph, tmp_path / "bn.onnx")
    model = onnx.load(tmp_path / "bn.onnx")
    read = {i for n in model.graph.node for i in n.input}
    assert sorted(t.name for t in model.graph.initializer) == sorted(read & {t.name for t in model.graph.initializer})
    assert "1.num_batches_tracked" not in {t.name for t in model.graph.initializer}
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(F32)
    options = ort.SessionOptions()
    options.log_severity_level = 2  # warnings, as an unread initializer gets
    (y,) = ort.InferenceSession(str(tmp_path / "bn.onnx"), options).run(None, {"input": x})
    np.testing.assert_allclose(y, _eager(net, input=x).numpy(), rtol=1e-5, atol=1e-5)
    assert "It is not used by any node" not in capfd.readouterr().err


class Positions(nn.Module):
    """A learned table of 64 positions sliced by the sequence length: only seq <= 64 can run."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(64, 8))

    def forward(self, x: Any) -> Any:
        return x + self.pos[: x.shape[1]]


def test_a_guard_narrowing_a_declared_dim_is_a_warning_and_the_range_follows_it() -> None:
    from aotc.frontend.pinned import PinnedDimWarning

    spec = {"x": TensorSpec((Dim("batch", min=1, max=8), Dim("seq", min=1, max=128), 8))}
    with pytest.warns(PinnedDimWarning) as warned:
        graph = import_torch(Positions().eval(), spec)
    (w,) = warned
    text = str(w.message)
    assert "dim 'seq' is declared dynamic over [1, 128], but the model's guard seq <= 64" in text, text
    assert "(from torch's range for seq) narrows it: it runs only at seq in [1, 64]" in text, text
    assert [(s.name, s.min, s.max) for s in graph.symbols] == [("batch", 1, 8), ("seq", 1, 64)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import_torch(Positions().eval(), {"x": TensorSpec((Dim("batch", min=1, max=8), Dim("seq", min=1, max=64), 8))})


def _saved_pair(tmp_path: Path) -> Path:
    """A program saved with torch.export.save, which keeps no dim names: ``rows`` comes back as ``s0``-style."""
    from torch.export import Dim as TDim
    from torch.export import export

    class Pair(nn.Module):
        def forward(self, x: Any, y: Any) -> Any:
            return torch.cat([x, y], 0).sum(0)

    b = TDim("rows", min=1, max=32)
    ep = export(Pair(), (torch.randn(8, 3), torch.randn(16, 3)), dynamic_shapes={"x": {0: b}, "y": {0: 2 * b}})
    torch.export.save(ep, tmp_path / "pair.pt2")
    return tmp_path / "pair.pt2"


def test_a_saved_program_compiles_from_the_cli_with_its_dims_named(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from aotc.artifact import read_artifact
    from aotc_cli.main import cli

    path = _saved_pair(tmp_path)
    loaded = torch.export.load(path)
    assert [
        (s.name, s.min, s.max) for s in aotc.compile(loaded, options=aotc.CompileOptions(targets=())).graph.symbols
    ] == [("x_0", 1, 32)]
    named = aotc.compile(loaded, dim_names={"x": {0: "rows"}}, options=aotc.CompileOptions(targets=()))
    assert [str(v.type) for v in named.graph.inputs] == ["float32[rows, 3]", "float32[2*rows, 3]"]
    x, y = np.ones((3, 3), F32), np.full((6, 3), 2.0, F32)
    np.testing.assert_allclose(named(x=x, y=y), loaded.module()(torch.from_numpy(x), torch.from_numpy(y)).numpy())

    def compile_cli(*args: str) -> Any:
        return CliRunner().invoke(
            cli, ["compile", str(path), "-o", str(tmp_path / "pair.aotc"), "--target", "none", *args]
        )

    result = compile_cli("--dim-name", "x:0=rows")
    assert result.exit_code == 0, result.output
    art = read_artifact(tmp_path / "pair.aotc")
    assert [(s.name, s.min, s.max) for s in art.variants[0].graph.symbols] == [("rows", 1, 32)]
    for args, said in (
        (("--dim-name", "y:0=rows"), "y:0 is 2*s"),  # derived: name its root
        (("--dim-name", "z:0=rows"), "no input 'z'; its inputs are ['x', 'y']"),
        (("--dim-name", "x:1=rows"), "x:1 is static (3)"),
        (("--dim-name", "x:0=2rows"), "a dim name must be a Python identifier"),
        (("--dim", "x_0=1:8"), "--dim applies to ONNX files"),
    ):
        result = compile_cli(*args)
        assert result.exit_code == 1 and said in result.stderr and "Traceback" not in result.stderr, result.output
    result = compile_cli("--dim-name", "x0=rows")
    assert result.exit_code == 2 and "INPUT:AXIS=NAME" in result.stderr
    (tmp_path / "junk.pt2").write_bytes(b"not a zip")
    result = CliRunner().invoke(cli, ["compile", str(tmp_path / "junk.pt2"), "-o", str(tmp_path / "j.aotc")])
    assert result.exit_code == 1 and "is not a program torch.export.save wrote" in result.stderr, result.output


def test_compile_help_names_torch_modules_and_saved_programs() -> None:
    from click.testing import CliRunner

    from aotc_cli.main import cli

    text = CliRunner().invoke(cli, ["compile", "--help"]).output
    assert "torch.nn.Module" in text and ".pt2" in text and "--dim-name" in text and "torch.export.save" in text


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(4, 8, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.gru(x)[0]  # torch's GRU specializes the time axis inside torch


def test_an_error_raised_inside_torch_code_names_the_models_line() -> None:
    """torch records the guard inside its own code (torch/_ops.py, under nn.GRU): the message names the nearest
    frame of the model's own file instead."""
    line = next(i for i, t in enumerate(Path(__file__).read_text().splitlines(), 1) if "return self.gru(x)[0]" in t)
    spec = {"x": TensorSpec((Dim("batch", min=1, max=8), Dim("seq", min=2, max=16), 4))}
    with pytest.raises(aotc.TraceError, match=rf"^(.*/)?{HERE}:{line}: dim 'seq' .* specialized it to the constant"):
        aotc.compile(Recurrent().eval(), spec)
