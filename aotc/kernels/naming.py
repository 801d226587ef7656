"""How generated kernels name things, so their text reads like Triton's tutorials.

- Pointer parameters by role: a weight by its parameter name (``weight_ptr``, ``bias_ptr``; ``wte_weight_ptr`` and
  ``wpe_weight_ptr`` where two would clash), a graph input by its input name (``input_ids_ptr``), a value a
  template reads in a role by that role (``qkv_ptr``), any other value ``x_ptr``, ``y_ptr``, ``z_ptr``; what the
  kernel writes ``out_ptr`` (``out_ptr1``...: the plan checks know a written pointer by that prefix).
- Values by what they are: a load by its pointer's role (``bias = tl.load(bias_ptr + ...)``; ``x``, ``x1``... where
  loads share it), a stored temporary by its output (``out``, ``out1``), the rest ``t0``, ``t1``... and the
  templates' own names (``acc``, ``q``).
- A header comment naming the graph nodes the kernel computes, by the user's source line, and the other launches
  that run the same code.
- The kernel's own name: its position, template and what it fuses (``k6_matmul_bias_gelu``).
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Collection, Mapping, Sequence

from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.types import Node

OUT = "out_ptr"  # aotc/artifact/launch_checks.py: a pointer the kernel stores through starts with it
_POOL = ("x", "y", "z")
_WIDTH = 112  # header comment lines wrap here
# Names a value must not take: Python's keywords and builtins, and the modules a kernel's source imports.
_PYTHON = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | {"tl", "triton", "math"}


def pointer_names(
    graph: Graph,
    producers: Mapping[int, tuple[int, Node]],
    pointers: Sequence[tuple[str, int, bool]],
    roles: Mapping[int, Sequence[str]],
    taken: Collection[str],
) -> dict[str, str]:
    """Placeholder -> final name for ``pointers`` (placeholder, value id, written), avoiding ``taken``."""
    inputs = dict(zip((v.id for v in graph.inputs), graph.input_names))
    choices: dict[str, list[str]] = {}
    for holder, vid, written in pointers:
        if written:
            continue
        producer = producers.get(vid)
        if producer is not None and producer[1].op is Op.CONSTANT:
            choices[holder] = _suffixes(str(producer[1].attrs["name"]))
        elif vid in inputs:
            choices[holder] = _suffixes(inputs[vid])[:1]
        elif roles.get(vid):
            choices[holder] = ["".join(roles[vid])]
    level = dict.fromkeys(choices, 0)
    while True:  # every member of a clash takes a longer name, while one has one
        by_name: dict[str, list[str]] = {}
        for h in choices:
            by_name.setdefault(choices[h][level[h]], []).append(h)
        longer = [h for group in by_name.values() if len(group) > 1 for h in group if level[h] + 1 < len(choices[h])]
        if not longer:
            break
        for h in longer:
            level[h] += 1
    used = set(taken)
    out: dict[str, str] = {}

    def claim(stem: str, holder: str, suffix: str = "_ptr") -> None:
        name, n = f"{stem}{suffix}", 0
        while name in used:
            n += 1
            name = f"{stem}{n}{suffix}" if suffix else f"{stem}{n}"
        used.add(name)
        out[holder] = name

    for holder, _, written in pointers:
        if written:
            claim(OUT, holder, "")
        elif holder in choices:
            claim(_no_out(choices[holder][level[holder]]), holder)
    pool = iter(_POOL)
    rest = [holder for holder, _, written in pointers if not written and holder not in choices]
    for k, holder in enumerate(rest):
        stem = next((p for p in pool if f"{p}_ptr" not in used), None)
        claim(stem or f"x{k}", holder)
    return out


def value_names(values: Sequence[tuple[str, str]], taken: Collection[str]) -> dict[str, str]:
    """Temporary -> final name for ``values`` (a temporary, the pointer it is loaded from or stored through): the
    pointer's role (``bias`` from ``bias_ptr``, ``out1`` from ``out_ptr1``), numbered where values share a role or
    the role is ``taken`` or a Python name (``bias1``, ``input1``; ``w1_1`` after a digit). A number never makes
    another value's role (``x1`` stays free for ``x1_ptr``'s loads)."""
    stems = [_value_stem(p) for _, p in values]
    roles = set(stems)
    used = set(taken) | _PYTHON
    out: dict[str, str] = {}
    for (temp, _), stem in zip(values, stems):
        name, n = stem, 0
        while name in used or (n and name in roles):
            n += 1
            name = f"{stem}_{n}" if stem[-1].isdigit() else f"{stem}{n}"
        used.add(name)
        out[temp] = name
    return out


def _value_stem(pointer: str) -> str:
    """``bias_ptr`` -> ``bias``, ``out_ptr1`` -> ``out1``: a pointer's role, as a name a kernel may bind."""
    stem = re.sub(r"_ptr(\d*)$", r"\1", pointer).lstrip("_")
    return stem if stem.isidentifier() else "v"


def _suffixes(name: str) -> list[str]:
    """Identifiers from a dotted (or ONNX's slashed) parameter name, shortest first: ``h.0.ln_1.weight`` ->
    ``weight``, ``ln_1_weight``, ``h_0_ln_1_weight`` (a part that starts with a digit never starts one; a
    numbered leaf loses its number: ``_folded.449``, a constant lowering made, is ``folded``)."""
    parts = [p for p in (re.sub(r"\W+", "_", s).strip("_").lower() for s in re.split(r"[./:]", name)) if p]
    while len(parts) > 1 and parts[-1].isdigit():
        parts.pop()
    if parts and re.fullmatch(r"[a-z_]\w*?_\d+", parts[-1]):
        parts[-1] = parts[-1].rsplit("_", 1)[0]
    out = ["_".join(parts[k:]) for k in range(len(parts) - 1, -1, -1)]
    return [c for c in out if c[0].isalpha() or c[0] == "_"] or [f"w_{out[-1]}" if out else "w"]


def _no_out(stem: str) -> str:
    """A read pointer never looks like a written one."""
    return f"in_{stem}" if f"{stem}_ptr".startswith(OUT) else stem


def header(name: str, graph: Graph, nodes: Sequence[int]) -> list[str]:
    """Comment lines naming the graph nodes ``name`` computes (``%35 matmul``), grouped by the user's source line."""
    by_loc: dict[str, list[str]] = {}
    for i in nodes:
        node = graph.nodes[i]
        by_loc.setdefault(node.loc or "(no source line)", []).append(f"%{i} {node.op.value}")
    out = [f"# {name} computes these nodes of {graph.name!r}, by source line:"]
    for loc, items in by_loc.items():
        line = f"#   {loc}:"
        for item in items:
            if len(line) + len(item) + 2 > _WIDTH and not line.endswith(":"):
                out.append(line + ",")
                line = "#     "
            line += (" " if line.endswith(":") or line.endswith("  ") else ", ") + item
        out.append(line)
    return out


def sharers(others: Sequence[str]) -> list[str]:
    """Comment lines a shared code's header ends with: the other launches that run it, by their own names
    (``# The same code also runs launches k7_reduction_layernorm, k10_reduction_layernorm, each on its own
    nodes.``)."""
    words = [f"{name}," for name in others]
    words[-1] = words[-1].removesuffix(",") + (", each on its own nodes." if len(others) > 1 else ", on its own nodes.")
    out = ["# The same code also runs launch" + ("es" if len(others) > 1 else "")]
    for word in words:
        if len(out[-1]) + len(word) + 1 > _WIDTH:
            out.append("#  ")
        out[-1] += " " + word
    return out


def kernel_name(
    graph: Graph,
    producers: Mapping[int, tuple[int, Node]],
    kind: str,
    nodes: Collection[int],
    root: Node | None,
    idx: int,
) -> str:
    """``k6_matmul_bias_gelu``: position, template and what it fuses, read off its nodes."""
    words = [w for w in _words(graph, producers, sorted(nodes), root) if w != kind]
    return f"k{idx}_{kind}" + "".join(f"_{w}" for w in dict.fromkeys(words))


_VIEWS = {"reshape", "permute", "broadcast", "slice", "squeeze", "unsqueeze", "expand", "flip", "cast"}
_QUIET = _VIEWS | {"full", "iota", "constant"}


def _words(
    graph: Graph, producers: Mapping[int, tuple[int, Node]], nodes: Sequence[int], root: Node | None
) -> list[str]:
    """What a kernel's nodes amount to, in a few words: the patterns decompositions leave (tanh or erf GELU,
    layer norm, RMS norm, softmax, embedding), a contraction's bias and residual adds, else its main ops."""
    inside = set(nodes)
    names = [graph.nodes[i].op.value for i in nodes]
    count = {n: names.count(n) for n in names}
    words: list[str] = []
    if "gather" in count:
        words.append("embedding" if count.get("add") else "gather")
    if root is not None and root.op in (Op.MATMUL, Op.CONV):
        for i in nodes:
            node = graph.nodes[i]
            if node.op is Op.ADD:
                ends = [_origin(producers, v.id, inside) for v in node.inputs]
                if "constant" in ends:
                    words.append("bias")
                elif "outside" in ends:
                    words.append("residual")
    consts = {round(float(graph.nodes[i].attrs["value"]), 6) for i in nodes if _is_number(graph.nodes[i])}
    if ("tanh" in count and 0.044715 in consts) or ("erf" in count and consts & {0.707107, 1.414214}):
        words.append("gelu")
    else:
        if "exp" in count and "neg" in count and ("div" in count or "reciprocal" in count):
            words.append("sigmoid")
        if "tanh" in count:
            words.append("tanh")
    if "rsqrt" in count and count.get("reduce_sum", 0) >= 2:
        words.append("layernorm")
    elif "rsqrt" in count and count.get("reduce_sum", 0) == 1:
        words.append("rmsnorm")
    elif "reduce_max" in count and "exp" in count and "reduce_sum" in count:
        words.append("softmax")
    if words or (root is not None and root.op is Op.SDPA):
        return words
    rest = [n.replace("reduce_", "") for n in names if n not in _QUIET and (root is None or n != root.op.value)]
    return list(dict.fromkeys(rest))[:3]


def _origin(producers: Mapping[int, tuple[int, Node]], vid: int, inside: Collection[int]) -> str:
    """Where value ``vid`` comes from, through views: ``constant`` (a weight), ``outside`` (another kernel or a
    graph input) or ``inside`` (this kernel computes it)."""
    while True:
        entry = producers.get(vid)
        if entry is None:
            return "outside"
        i, node = entry
        if node.op is Op.CONSTANT:
            return "constant"
        if node.op.value not in _VIEWS or not node.inputs:
            return "inside" if i in inside else "outside"
        vid = node.inputs[0].id


def _is_number(node: Node) -> bool:
    return node.op is Op.FULL and isinstance(node.attrs.get("value"), (int, float))
