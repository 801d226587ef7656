"""Each kernel of an artifact as a Python file that runs on its own (``aotc compile --dump-kernels DIR``).

A file holds the kernel's Triton source as the artifact stores it, a docstring saying what it computes (the graph
nodes and the user's source lines), its grid, tiles and arguments, and a ``__main__`` that launches it under
``TRITON_INTERPRET=1`` on torch tensors: random ones, or those of an ``.npz`` (``--load``), writing every pointer
argument back (``--save``) so a run can be compared with the artifact's own. Only the launch's first occurrence
in each variant is written; a kernel launched several times reads the same code with other arguments.
"""

from __future__ import annotations

import re

from aotc.artifact.reader import Artifact
from aotc.ir.graph import Graph
from aotc.ir.schedule import ArgKind, Kernel, Schedule
from aotc.ir.symbolic import to_infix
from aotc_cli.feeds import choose_dims

# Pointer types as torch dtypes (the file imports torch, as Triton's tutorials do).
_TORCH_DTYPES = {
    "*fp32": "torch.float32",
    "*fp16": "torch.float16",
    "*bf16": "torch.bfloat16",
    "*i64": "torch.int64",
    "*i32": "torch.int32",
    "*i8": "torch.int8",
    "*u8": "torch.uint8",
    "*i1": "torch.bool",
}

_MAIN = '''

# -- running it on its own ---------------------------------------------------------------------------------------
def launch(arrays, dims):
    """Launch over ``arrays`` (pointer argument name -> torch tensor) for ``dims`` (dim name -> value)."""
    sizes = size_args(**dims)
    args = [arrays[name] if kind != "size" else sizes[name] for name, kind, _, _ in ARGS]
    {name}[grid(**dims)](*args, {constexprs}num_warps={num_warps}, num_stages={num_stages})


def example(dims, seed=0):
    """Random tensors for every pointer argument (ids and masks in [0, 2), valid for every model; flags 0)."""
    gen = torch.Generator().manual_seed(seed)
    out = {{}}
    for name, kind, dtype, shape in ARGS:
        if kind == "size":
            continue
        shape = tuple(eval(d, {{}}, dict(dims)) if isinstance(d, str) else d for d in shape)  # noqa: S307
        if kind == "flag" or not dtype.is_floating_point:
            out[name] = torch.randint(0, 2 if kind != "flag" else 1, shape, generator=gen).to(dtype)
        else:
            out[name] = torch.randn(shape, generator=gen).to(dtype)
    return out


if __name__ == "__main__":
    import argparse

    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dims", nargs="*", metavar="NAME=VALUE", help="dim values (default: DIMS)")
    parser.add_argument("--load", metavar="IN.npz", help="the pointer arguments' tensors, by argument name")
    parser.add_argument("--save", metavar="OUT.npz", help="write every pointer argument after the launch")
    opts = parser.parse_args()
    dims = {{**DIMS, **{{k: int(v) for k, v in (d.split("=", 1) for d in opts.dims)}}}}
    if opts.load:
        with np.load(opts.load) as z:  # bf16 travels as its raw 16 bits
            raw = {{k: torch.from_numpy(z[k].copy()) for k in z.files}}
        arrays = {{n: raw[n].view(dtype) if dtype == torch.bfloat16 else raw[n] for n, kind, dtype, _ in ARGS if n in raw}}
    else:
        arrays = example(dims)
    launch(arrays, dims)
    if opts.save:
        np.savez(opts.save, **{{n: (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy() for n, t in arrays.items()}})
    for name, t in arrays.items():
        print(f"{{name}}: {{tuple(t.shape)}} {{t.dtype}} sum={{t.double().sum().item():.6g}}")
'''


def kernel_files(artifact: Artifact) -> dict[str, str]:
    """File name -> text, one per distinct kernel code (per-architecture launches included)."""
    files: dict[str, str] = {}
    for variant in artifact.variants:
        graph, schedule = variant.graph, variant.plan
        if schedule is None:
            continue
        for launch_index, k in enumerate(schedule.kernels):
            for code in (k, *(v.kernel for v in k.arch_launches)):
                name = f"{code.name}.py"
                if name not in files:
                    files[name] = kernel_file(artifact.name, graph, schedule, code, launch_index)
    return files


def kernel_file(model: str, graph: Graph, schedule: Schedule, k: Kernel, launch_index: int) -> str:
    """One kernel as a runnable Python file (see the module docstring)."""
    symbols = [s.name for s in graph.symbols]
    hints = choose_dims(graph, {})  # as `aotc run --random` picks them: inside the ranges, meeting the guards
    values = {v.id: v for v in graph.inputs}
    for n in graph.nodes:
        values.update({v.id: v for v in n.outputs})
    lines = [
        f'"""{k.name}: a kernel of {model!r}, first launched as launch {launch_index} of variant {graph.name!r}.',
        "",
    ]
    lines += ["It computes these graph nodes (op, then where the model wrote it):"]
    lines += [f"  %{_out(graph, i)} {graph.nodes[i].op.value}  {graph.nodes[i].loc or '-'}" for i in k.nodes]
    lines += ["", f"Grid: ({', '.join(to_infix(d) for d in k.grid)}).  {k.num_warps} warps, {k.num_stages} stages."]
    if k.constexprs:
        lines.append("Tiles and other constants: " + ", ".join(f"{n}={v}" for n, v in k.constexprs) + ".")
    lines += ["", "Arguments:"]
    args = []
    for a in k.args:
        if a.kind is ArgKind.SIZE:
            lines.append(f"  {a.name}: {a.type} = {to_infix(a.size)}")
            args.append(f'    ("{a.name}", "size", None, None),')
            continue
        if a.kind is ArgKind.FLAG:
            shape: tuple = (max(schedule.flags, 1),)
            lines.append(f"  {a.name}: the int32 error flags ({schedule.flags} slots; a kernel sets one on a bad id)")
        else:
            v = values[a.value]
            shape = tuple(d if isinstance(d, int) else to_infix(d) for d in v.type.shape)
            lines.append(f"  {a.name}: {v.type} (value %{a.value})")
        args.append(f'    ("{a.name}", "{a.kind.value}", {_TORCH_DTYPES[a.type]}, {shape!r}),')
    run = "TRITON_INTERPRET=1 python " + f"{k.name}.py " + " ".join(f"{n}={hints[n]}" for n in symbols)
    lines += ["", f"Run it on its own: {run.strip()}", '"""', ""]
    source = k.source.strip("\n")
    params = ", ".join(symbols)
    body = [
        "",
        "import torch  # noqa: E402",
        "",
        "# name, kind (buffer, size or flag), torch dtype, shape (dims as expressions over the dim names)",
        "ARGS = [",
        *args,
        "]",
        f"DIMS = {hints!r}  # an example value for each dim, inside its range",
        "",
        "",
        f"def grid({params}):",
        f"    return ({', '.join(_py(d) for d in k.grid)})",
        "",
        "",
        f"def size_args({params}):",
        "    return {" + ", ".join(f'"{a.name}": {_py(a.size)}' for a in k.args if a.kind is ArgKind.SIZE) + "}",
    ]
    constexprs = "".join(f"{n}={v}, " for n, v in k.constexprs)
    main = _MAIN.format(name=k.name, constexprs=constexprs, num_warps=k.num_warps, num_stages=k.num_stages)
    return "\n".join(lines) + source + "\n" + "\n".join(body) + "\n" + main


def _out(graph: Graph, i: int) -> str:
    return ", %".join(str(o.id) for o in graph.nodes[i].outputs)


def _py(e: object) -> str:
    """A size expression as Python over the dim names: ``to_infix`` writes floor division and ``min``/``max``
    as Python reads them."""
    text = to_infix(e)  # type: ignore[arg-type]
    if not re.fullmatch(r"[\w\s+\-*/%(),]*", text):
        raise ValueError(f"size expression {text!r} is not Python")  # to_infix grew a form Python doesn't read
    return text
