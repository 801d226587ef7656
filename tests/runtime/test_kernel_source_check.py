"""A kernel's source is checked before the interpret backend runs any of it (``aotc.ir.kernel_source``): what
aotc's codegen writes passes, in every example model; code that would run when the source loads (module-level
statements, decorators, defaults, annotations) or that cannot be Triton (imports, builtins such as ``open``,
dunders, a tensor's ``handle``, lambdas, classes, ...) is refused with an ArtifactError naming the kernel and the
line, and the payload never runs. Also the text tricks that would make Triton's interpreter run other text than
the checked one: a ``def`` hidden in a string, a line break only ``str.splitlines`` sees."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from aotc.errors import AotcError, ArtifactError
from aotc.ir.kernel_source import BUILTINS, TL_NAMES, TRITON_NAMES, VALUE_ATTRS, check_kernel_source
from aotc.ir.variant import Variant
from aotc.kernels.scheduler import schedule_graph
from aotc.runtime.backends import InterpretBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "artifact"))
from kernel_kit import golden_model

from tests.kernel_layer.model_kit import CONFIGS, lowered

HEADER = "import triton\nimport triton.language as tl\n\n\n"
GOOD = (
    HEADER
    + """@triton.jit
def _square(x):
    return x * x


@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, 1):
        acc += _square(x)
    y = tl.maximum(acc, float("-inf"), propagate_nan=tl.PropagateNan.ALL)
    tl.store(out_ptr + offs, y.to(x.dtype), mask=mask)
"""
)


def marker(tmp_path: Path) -> str:
    return str(tmp_path / "payload-ran")


def payloads(m: str) -> list[tuple[str, str, str]]:
    """(label, source of kernel k, what the refusal says): each would write file ``m`` if it ran."""
    body = "    tl.store(x_ptr, 1)\n"
    fn = "@triton.jit\ndef k(x_ptr):\n"
    return [
        ("module statement", HEADER + f"open({m!r}, 'w').close()\n" + fn + body, "at module level"),
        ("module assignment", HEADER + f"X = open({m!r}, 'w')\n" + fn + body, "at module level"),
        ("module import", HEADER + "import os\n" + fn + body, "an import of os"),
        ("from import", HEADER + "from os import system\n" + fn + body, "at module level"),
        (
            "decorator",
            HEADER + f"@(open({m!r}, 'w').close() or triton.jit)\ndef k(x_ptr):\n" + body,
            "decorated otherwise",
        ),
        ("second decorator", HEADER + "@triton.jit\n@staticmethod\ndef k(x_ptr):\n" + body, "decorated otherwise"),
        ("decorator call", HEADER + "@triton.jit()\ndef k(x_ptr):\n" + body, "decorated otherwise"),
        ("default", HEADER + f"@triton.jit\ndef k(x_ptr, B=open({m!r}, 'w')):\n" + body, "with defaults"),
        ("annotation", HEADER + f"@triton.jit\ndef k(x_ptr: open({m!r}, 'w')):\n" + body, "annotated otherwise"),
        ("return annotation", HEADER + f"@triton.jit\ndef k(x_ptr) -> open({m!r}, 'w'):\n" + body, "annotation"),
        ("import in function", HEADER + fn + "    import os\n" + f"    os.system('touch {m}')\n", "an import"),
        ("open", HEADER + fn + f"    open({m!r}, 'w')\n", "the name 'open'"),
        ("__import__", HEADER + fn + f"    __import__('os').system('touch {m}')\n", "__import__"),
        ("exec", HEADER + fn + "    exec('1')\n", "the name 'exec'"),
        ("eval", HEADER + fn + "    eval('1')\n", "the name 'eval'"),
        ("globals", HEADER + fn + "    globals()\n", "the name 'globals'"),
        ("getattr", HEADER + fn + "    getattr(tl, 'core')\n", "the name 'getattr'"),
        ("interpreter global", HEADER + fn + "    x = np\n", "the name 'np'"),
        ("dunder attribute", HEADER + fn + "    x = x_ptr.__class__\n", "private or dunder"),
        ("tensor memory", HEADER + fn + f"    x_ptr.handle.data.tofile({m!r})\n", "'handle'"),
        ("other value attribute", HEADER + fn + "    x = 'a'.format(1)\n", "'format'"),
        ("tl submodule", HEADER + fn + "    tl.core.builtins.exec('1')\n", "tl.core.builtins.exec"),
        ("triton machinery", HEADER + fn + "    triton.knobs.runtime\n", "triton.knobs.runtime"),
        ("tl.math depth", HEADER + fn + "    x = tl.PropagateNan.ALL.value\n", "tl.PropagateNan.ALL.value"),
        ("module as value", HEADER + fn + "    m = tl\n", "module tl used as a value"),
        (
            "inline assembly",
            HEADER + fn + "    tl.inline_asm_elementwise('', '', [], tl.int32, True, 1)\n",
            "not Triton's",
        ),
        ("libdevice", HEADER + fn + "    tl.extra.cuda.libdevice.exp(1.0)\n", "tl.extra.cuda.libdevice.exp"),
        ("jit in a body", HEADER + fn + "    triton.jit(x_ptr)\n", "triton.jit, which is not"),
        (
            "import shadows a function",
            "import triton\n\n\n@triton.jit\ndef math(x):\n    return x\n\n\nimport math\n" + fn + body,
            "an import of math",
        ),
        (
            "function attribute",
            HEADER + "@triton.jit\ndef h(x):\n    return x\n\n\n" + fn + "    h.fn\n",
            "kernel function h",
        ),
        ("lambda", HEADER + fn + "    f = lambda: 0\n", "a lambda"),
        ("class", HEADER + fn + "    class C:\n        pass\n", "a class definition"),
        ("nested def", HEADER + fn + "    def g():\n        pass\n", "a nested function"),
        ("comprehension", HEADER + fn + "    x = [i for i in range(3)]\n", "a comprehension"),
        ("global", HEADER + fn + "    global tl\n", "a global declaration"),
        ("try", HEADER + fn + "    try:\n        pass\n    except Exception:\n        pass\n", "a try statement"),
        ("with", HEADER + fn + "    with x_ptr:\n        pass\n", "a with statement"),
        ("walrus", HEADER + fn + "    (y := 1)\n", "an assignment expression"),
        ("attribute store", HEADER + fn + "    tl.load = 1\n", "an assignment to something other than a name"),
        ("subscript store", HEADER + fn + "    x = [0]\n    x[0] = 1\n", "other than a name"),
        ("dict", HEADER + fn + "    x = {}\n", "a dict display"),
        ("star", HEADER + fn + "    tl.store(*x_ptr)\n", "star unpacking"),
        ("double star", HEADER + fn + "    tl.store(**x_ptr)\n", "a ** argument"),
        ("shadowed module", HEADER + fn + "    tl = 1\n", "binding tl"),
        ("loop else", HEADER + fn + "    for i in range(1):\n        pass\n    else:\n        pass\n", "else branch"),
        # Triton's interpreter re-reads a function from its last line starting with "def ": a def in a string
        (
            "def in a string",
            HEADER + fn + '    s = """\ndef k(x_ptr):\n    import os\n"""\n',
            "a string spanning lines",
        ),
        ("string spanning lines", HEADER + fn + "    s = 'a\\\ndef k(x_ptr):'\n", "a string spanning lines"),
        ("unicode line break", HEADER + fn + "    x = 1  # \u2028def k(x_ptr):\n", "line-break character"),
        ("carriage return", HEADER + fn.replace("\n", "\r\n") + body, "line-break character"),
        ("tab after def", HEADER + "@triton.jit\ndef\tk(x_ptr):\n" + body, "definition not on a line"),
        ("async def", HEADER + "async def k(x_ptr):\n" + body, "an async function definition at module level"),
        ("no kernel", HEADER + "@triton.jit\ndef other(x_ptr):\n" + body, "defines no @triton.jit function named"),
        ("syntax error", HEADER + "def k(:\n", "does not load: SyntaxError"),
    ]


def test_what_codegen_writes_passes() -> None:
    tree = check_kernel_source(GOOD, "k")
    assert [type(s).__name__ for s in tree.body] == ["Import", "Import", "FunctionDef", "FunctionDef"]
    _, _, schedule = golden_model()
    for k in schedule.kernels:
        check_kernel_source(k.source, k.name)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("fuse_attention", [False, True])
def test_every_example_models_kernels_pass(name: str, fuse_attention: bool) -> None:
    schedule = schedule_graph(lowered(name, fuse_attention=fuse_attention))
    for k in schedule.kernels:
        check_kernel_source(k.source, k.name)
        for v in k.arch_launches:
            check_kernel_source(v.kernel.source, v.kernel.name)


@pytest.mark.parametrize(("label", "source", "match"), payloads("/nonexistent/m"), ids=[p[0] for p in payloads("")])
def test_payloads_are_refused_naming_kernel_and_line(label: str, source: str, match: str) -> None:
    with pytest.raises(ArtifactError, match=r"^kernel k: its source ") as info:
        check_kernel_source(source, "k")
    msg = str(info.value)
    assert match in msg, msg
    assert "\n" not in msg
    if label not in ("no kernel", "syntax error"):
        assert " line " in msg, msg


def test_refusals_quote_the_line() -> None:
    src = HEADER + "@triton.jit\ndef k(x_ptr):\n    import os\n"
    with pytest.raises(ArtifactError) as info:
        check_kernel_source(src, "k")
    assert str(info.value) == "kernel k: its source line 7 (`import os`) holds an import in a kernel"


def test_non_text_is_refused() -> None:
    with pytest.raises(ArtifactError, match="not text"):
        check_kernel_source(b"import triton", "k")  # type: ignore[arg-type]


def test_allow_lists_reach_no_machinery() -> None:
    """The names a kernel may use on tl, triton and values are Triton's language, never a module or the
    interpreter's memory."""
    triton = pytest.importorskip("triton")
    import inspect

    import triton.language as tl

    for n in TL_NAMES:
        assert not inspect.ismodule(getattr(tl, n, None)), n
    for n in TRITON_NAMES:
        assert callable(getattr(triton, n)), n
    modules = {n for m in (triton, tl) for n in dir(m) if inspect.ismodule(getattr(m, n))}
    assert not (VALUE_ATTRS & modules)
    assert not (VALUE_ATTRS & {"handle", "data", "fn", "tofile", "ctypes", "to_ir", "rewriter"})
    assert not (BUILTINS & {"getattr", "hasattr", "setattr", "open", "exec", "eval", "__import__", "globals", "vars"})


# -- the interpret backend checks before it runs anything ------------------------------------------


def _bad_schedule(source: str):  # type: ignore[no-untyped-def]
    _, variant, schedule = golden_model()
    k0 = schedule.kernels[0]
    bad = k0.replace(source=source.replace("def k(", f"def {k0.name}(").replace("k(x_ptr)", k0.name + "(x_ptr)"))
    return variant, dataclasses.replace(schedule, kernels=(bad, *schedule.kernels[1:]))


@pytest.mark.parametrize(("label", "source", "match"), payloads("MARKER"), ids=[p[0] for p in payloads("")])
def test_interpret_backend_refuses_before_running(tmp_path: Path, label: str, source: str, match: str) -> None:
    pytest.importorskip("triton")
    m = marker(tmp_path)
    source = source.replace("MARKER", m)
    variant, schedule = _bad_schedule(source)
    with pytest.raises(AotcError) as info:
        InterpretBackend().prepare(Variant(variant, schedule), {})  # at load, before any call
    assert isinstance(info.value, ArtifactError), info.value
    assert str(info.value).startswith(f"kernel {schedule.kernels[0].name}: its source")
    # and should a plan reach the launcher some other way, it checks again before it compiles anything
    from aotc.runtime.backends import triton_interp

    k0 = schedule.kernels[0]
    with pytest.raises(ArtifactError, match=f"^kernel {k0.name}: its source"):
        triton_interp.load_function(k0.name, k0.source)
    assert not Path(m).exists()


def test_the_checked_tree_runs_with_only_tritons_builtins(tmp_path: Path) -> None:
    """Defence in depth: the compiled definitions see only the builtins Triton accepts, so even a name the checker
    missed finds no ``open``."""
    pytest.importorskip("triton")
    from aotc.runtime.backends import triton_interp

    fn = triton_interp.load_function("k", GOOD)
    assert sorted(fn.fn.__globals__["__builtins__"]) == sorted(BUILTINS)
    assert {"triton", "tl"} <= set(fn.fn.__globals__)
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    triton_interp.launch_source(GOOD, "k", (1,), [x, out, 8], ["*fp32", "*fp32", "i32"], {"BLOCK": 8})
    assert np.array_equal(out, x * x)
