"""What a kernel's Triton source may hold, checked before anything runs it.

A file's kernel table stores each kernel's Python source for the interpret backend, which executes it.
A file the product did not build must not run code of its own that way, so a source is parsed with
``ast`` (nothing runs) and accepted only when it is what aotc's codegen writes:

- at module level: ``import triton``, ``import triton.language as tl``, ``import math``, string constants,
  and function definitions decorated exactly with ``@triton.jit`` whose parameters have no defaults and
  at most a ``tl.<name>`` annotation, each on a line of its own beginning ``def <name>(``;
- inside those functions: Triton's language and nothing that cannot be Triton. Statements are
  assignments, expressions, ``if``/``for``/``while`` (no ``else``), ``break``/``continue``/``pass``,
  ``return`` and ``assert``; expressions are operators, comparisons, conditionals, calls, subscripts,
  tuples, lists and constants. Every name is a parameter, a local, a function of the source, an allowed
  builtin (``range``, ``min``, ...), or an imported module used as ``tl.<language name>``,
  ``triton.cdiv`` or ``math.<name>``; attributes of other values are the language's tensor and dtype
  members (``x.to``, ``x.dtype``, ...), never ``handle`` (which holds the memory under the interpreter)
  nor a name that starts with ``_``. No imports, nested functions, lambdas, classes, comprehensions,
  ``global``, ``try``, ``with``, ``del`` or stores into attributes or subscripts.

Triton's interpreter reads a function's text back by line and takes the last line starting with
``def `` as its start, so a string may not span lines and no other line may start with ``def ``, and
the source may hold no line break but ``\\n`` (``str.splitlines``, which ``linecache`` uses, splits on
more characters than Python's tokenizer does).

The checker is stdlib-only: the artifact reader and writer (``code_checks.check_code``) and the interpret
backend (before it compiles the checked tree) call it. Refusals are ``ArtifactError``s naming the kernel,
the line and what was found.
"""

from __future__ import annotations

import ast
import re

from aotc.errors import ArtifactError

# The modules a source may import, each by the one name codegen binds it to.
IMPORTS = {"triton": "triton", "triton.language": "tl", "math": "math"}

# The Python builtins Triton's code generator accepts inside a kernel, less getattr and hasattr.
BUILTINS = frozenset({"range", "min", "max", "float", "int", "len", "list", "isinstance", "print"})

# triton.language's public names (its __all__ in triton 3.6 and 3.9) less its submodules (math, extra,
# target_info) and inline assembly; ``tl.<name>`` is the only way a kernel reaches the language.
TL_DTYPES = frozenset(
    {
        "bfloat16", "float16", "float32", "float64", "float8e4b15", "float8e4b8", "float8e4nv", "float8e5",
        "float8e5b16", "int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "void",
    }
)  # fmt: skip
TL_NAMES = TL_DTYPES | frozenset(
    {
        "PropagateNan", "TRITON_MAX_TENSOR_NUMEL", "abs", "add", "advance", "arange", "argmax", "argmin",
        "associative_scan", "assume", "atomic_add", "atomic_and", "atomic_cas", "atomic_load", "atomic_max",
        "atomic_min", "atomic_or", "atomic_poll", "atomic_store", "atomic_xchg", "atomic_xor", "bitonic_merge",
        "block_type", "broadcast", "broadcast_to", "cast", "cat", "cdiv", "ceil", "clamp", "condition", "const",
        "constexpr", "constexpr_type", "cos", "cumprod", "cumsum", "debug_barrier", "device_assert",
        "device_print", "div_rn", "dot", "dot_scaled", "dtype", "erf", "exp", "exp2", "expand_dims",
        "expect_zero", "fdiv", "flip", "floor", "fma", "full", "gather", "histogram", "interleave", "join",
        "load", "load_tensor_descriptor", "log", "log2", "make_block_ptr", "make_tensor_descriptor",
        "map_elementwise", "max", "max_constancy", "max_contiguous", "maximum", "min", "minimum", "mul",
        "multiple_of", "num_programs", "pair_uniform_to_normal", "permute", "philox", "philox_impl", "pi32_t",
        "pointer_type", "program_id", "rand", "rand4x", "randint", "randint4x", "randn", "randn4x", "range",
        "ravel", "reduce", "reduce_or", "reshape", "rsqrt", "sigmoid", "sin", "slice", "softmax", "sort", "split",
        "sqrt", "sqrt_rn", "squeeze", "static_assert", "static_print", "static_range", "store",
        "store_tensor_descriptor", "sub", "sum", "swizzle2d", "tensor", "tensor_descriptor", "to_tensor", "topk",
        "trans", "tuple", "uint_to_uniform_float", "umulhi", "unsqueeze", "view", "where", "xor_sum", "zeros",
        "zeros_like",
    }
)  # fmt: skip
# ``tl.<name>.<member>`` beyond dtypes' members.
TL_MEMBERS = {"PropagateNan": frozenset({"ALL", "NONE"})}
TRITON_NAMES = frozenset({"cdiv", "next_power_of_2"})

# Members of values (tensors, dtypes, constexprs, tensor descriptors): tl.tensor's public methods and fields,
# tl.dtype's queries and a descriptor's ``load``/``store`` (``source_program`` bounds what those touch from the
# descriptor's shape and strides). Never ``handle``: under the interpreter it holds the tensor's numpy memory.
VALUE_ATTRS = frozenset(
    {
        "T", "abs", "advance", "argmax", "argmin", "associative_scan", "atomic_add", "atomic_and", "atomic_cas",
        "atomic_load", "atomic_max", "atomic_min", "atomic_or", "atomic_poll", "atomic_store", "atomic_xchg",
        "atomic_xor", "broadcast_to", "cast", "cdiv", "ceil", "cos", "cumprod", "cumsum", "erf", "exp", "exp2",
        "expand_dims", "flip", "floor", "gather", "histogram", "item", "load", "log", "log2", "logical_and", "logical_or",
        "max", "min", "permute", "ravel", "reduce", "reduce_or", "reshape", "rsqrt", "sigmoid", "sin", "softmax",
        "sort", "split", "sqrt", "sqrt_rn", "store", "sum", "to", "trans", "view", "xor_sum",
        "dtype", "shape", "type", "numel", "value",
        "element_ty", "scalar", "primitive_bitwidth", "int_bitwidth", "fp_mantissa_width", "get_int_max_value",
        "get_int_min_value", "is_bf16", "is_block", "is_bool", "is_floating", "is_fp16", "is_fp32", "is_fp64",
        "is_fp8", "is_int", "is_int1", "is_int8", "is_int16", "is_int32", "is_int64", "is_int_signed",
        "is_int_unsigned", "is_ptr", "is_standard_floating", "is_uint8", "is_uint16", "is_uint32", "is_uint64",
    }
)  # fmt: skip

# Characters str.splitlines breaks at but Python's tokenizer does not (NUL is refused by the parser).
_LINE_BREAK = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")

_STATEMENTS = (
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Expr,
    ast.If,
    ast.For,
    ast.While,
    ast.Break,
    ast.Continue,
    ast.Pass,
    ast.Return,
    ast.Assert,
)
_EXPRESSIONS = (
    ast.BoolOp,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.Name,
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.JoinedStr,
    ast.FormattedValue,
)
# Fields holding expression contexts and operators, which hold nothing to check.
_NOTHING_TO_CHECK = frozenset({"ctx", "op", "ops"})

_WHAT = {
    ast.Import: "an import",
    ast.ImportFrom: "an import",
    ast.FunctionDef: "a nested function definition",
    ast.AsyncFunctionDef: "an async function definition",
    ast.ClassDef: "a class definition",
    ast.Lambda: "a lambda",
    ast.Global: "a global declaration",
    ast.Nonlocal: "a nonlocal declaration",
    ast.Delete: "a del statement",
    ast.Try: "a try statement",
    ast.Raise: "a raise statement",
    ast.With: "a with statement",
    ast.AsyncWith: "an async with statement",
    ast.AsyncFor: "an async for loop",
    ast.ListComp: "a comprehension",
    ast.SetComp: "a comprehension",
    ast.DictComp: "a comprehension",
    ast.GeneratorExp: "a generator expression",
    ast.NamedExpr: "an assignment expression",
    ast.Await: "an await",
    ast.Yield: "a yield",
    ast.YieldFrom: "a yield",
    ast.Dict: "a dict display",
    ast.Set: "a set display",
    ast.Starred: "star unpacking",
}


def check_kernel_source(source: str, name: str) -> ast.Module:
    """The parsed module of kernel ``name``'s ``source``, once it holds only what is described above and
    defines ``name`` as a ``@triton.jit`` function. Raises ArtifactError naming the kernel, the line and
    what was found. Nothing in the source runs."""
    return _Checker(source, name).module()


def imported_modules(tree: ast.Module) -> dict[str, str]:
    """The names a checked module's imports bind, each to its module's name (``{"tl": "triton.language"}``)."""
    return {IMPORTS[a.name]: a.name for s in tree.body if isinstance(s, ast.Import) for a in s.names}


class _Checker:
    def __init__(self, source: str, name: str) -> None:
        self.source, self.name = source, name

    def fail(self, line: int | None, what: str) -> ArtifactError:
        where = ""
        if line is not None:
            text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
            where = f" line {line}" + (f" (`{text[:80]}{'...' if len(text) > 80 else ''}`)" if text else "")
        return ArtifactError(f"kernel {self.name}: its source{where} holds {what}")

    def module(self) -> ast.Module:
        if not isinstance(self.source, str):
            raise ArtifactError(f"kernel {self.name}: its source is a {type(self.source).__name__}, not text")
        self.lines = self.source.split("\n")
        brk = _LINE_BREAK.search(self.source)
        if brk is not None:
            raise self.fail(self.source.count("\n", 0, brk.start()) + 1, f"the line-break character {brk.group()!r}")
        try:
            tree = ast.parse(self.source, filename=f"<kernel {self.name}>")
        except SyntaxError as e:
            raise ArtifactError(
                f"kernel {self.name}: its source does not load: SyntaxError: {e.msg} (line {e.lineno})"
            ) from None
        except (ValueError, RecursionError, MemoryError) as e:
            raise ArtifactError(f"kernel {self.name}: its source does not load: {type(e).__name__}: {e}") from None
        self.modules: dict[str, str] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        for stmt in tree.body:
            self._module_statement(stmt)
        if self.name not in self.functions:
            raise ArtifactError(f"kernel {self.name}: its source defines no @triton.jit function named {self.name!r}")
        for f in self.functions.values():
            self._function(f)
        def_lines = {f.lineno for f in self.functions.values()}
        for i, line in enumerate(self.lines, 1):
            if line.lstrip().startswith("def ") and i not in def_lines:
                raise self.fail(i, "a line starting with `def ` that is not a kernel function's definition")
        return tree

    # -- module level ----------------------------------------------------------------------------
    def _module_statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                bound = a.asname or a.name
                if IMPORTS.get(a.name) != bound or bound in self.functions:
                    alias = f" as {a.asname}" if a.asname else ""
                    raise self.fail(
                        stmt.lineno,
                        f"an import of {a.name}{alias} (kernels import triton, triton.language as tl, math, "
                        "each before any function)",
                    )
                self.modules[bound] = a.name
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            self._string(stmt.value)
        elif isinstance(stmt, ast.FunctionDef):
            self._signature(stmt)
        else:
            what = _WHAT.get(type(stmt), f"a {type(stmt).__name__} statement")
            raise self.fail(stmt.lineno, f"{what} at module level, which would run when the source loads")

    def _signature(self, f: ast.FunctionDef) -> None:
        deco = f.decorator_list
        if len(deco) != 1 or not _is_triton_jit(deco[0]):
            line = deco[0].lineno if deco else f.lineno
            raise self.fail(line, f"function {f.name} decorated otherwise than with exactly @triton.jit")
        if "triton" not in self.modules:
            raise self.fail(f.lineno, f"function {f.name} decorated with triton.jit without `import triton` first")
        if f.name.startswith("__") or f.name in self.functions or f.name in self.modules:
            raise self.fail(f.lineno, f"a function named {f.name}, a dunder or a name already bound")
        if not self.lines[f.lineno - 1].startswith(f"def {f.name}("):
            raise self.fail(
                f.lineno, f"function {f.name}'s definition not on a line of its own starting `def {f.name}(`"
            )
        a = f.args
        if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults or a.kw_defaults:
            raise self.fail(f.lineno, f"function {f.name} with defaults, *args, **kwargs or keyword-only parameters")
        if f.returns is not None or getattr(f, "type_params", None):
            raise self.fail(f.lineno, f"function {f.name} with a return annotation or type parameters")
        for p in a.args:
            if p.annotation is not None and not self._tl_annotation(p.annotation):
                raise self.fail(p.lineno, f"parameter {p.arg} annotated otherwise than tl.<name>")
        self.functions[f.name] = f

    def _tl_annotation(self, e: ast.expr) -> bool:
        return (
            isinstance(e, ast.Attribute)
            and isinstance(e.value, ast.Name)
            and e.value.id == "tl"
            and "tl" in self.modules
            and e.attr in TL_NAMES
        )

    # -- inside a function -----------------------------------------------------------------------
    def _function(self, f: ast.FunctionDef) -> None:
        """Every node of ``f``'s body, depth first in source order; names are checked once all locals are known."""
        bound = {p.arg for p in f.args.args}
        roots: set[int] = set()  # names that are the object of an attribute access (tl in tl.load)
        loads: list[ast.Name] = []
        stack: list[ast.AST] = list(reversed(f.body))
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Store):
                    bound.add(node.id)
                else:
                    loads.append(node)
                continue
            self._node(node, roots)
            children: list[ast.AST] = []
            for field in node._fields:
                if field not in _NOTHING_TO_CHECK:
                    v = getattr(node, field, None)
                    if isinstance(v, ast.AST):
                        children.append(v)
                    elif isinstance(v, list):
                        children.extend(x for x in v if isinstance(x, ast.AST))
            stack.extend(reversed(children))
        for local in sorted(bound):
            if local.startswith("__") or local in self.modules or local in self.functions:
                raise self.fail(f.lineno, f"function {f.name} binding {local}, a dunder or a module or function name")
        for name in loads:
            self._name(name, bound, roots)

    def _node(self, node: ast.AST, roots: set[int]) -> None:
        line = getattr(node, "lineno", None)
        if isinstance(node, ast.stmt):
            if not isinstance(node, _STATEMENTS):
                raise self.fail(line, _WHAT.get(type(node), f"a {type(node).__name__} statement") + " in a kernel")
            if isinstance(node, (ast.For, ast.While)) and node.orelse:
                raise self.fail(line, "a loop with an else branch")
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
                targets = [node.target]
            for t in targets:
                for part in t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                    if not isinstance(part, ast.Name):
                        raise self.fail(line, "an assignment to something other than a name")
        elif isinstance(node, ast.expr):
            if not isinstance(node, _EXPRESSIONS):
                raise self.fail(line, _WHAT.get(type(node), f"a {type(node).__name__} expression") + " in a kernel")
            if isinstance(node, ast.Attribute):
                if isinstance(node.value, ast.Name):
                    roots.add(id(node.value))
                self._attribute(node)
            elif isinstance(node, (ast.Constant, ast.JoinedStr)):
                self._string(node)
            elif isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
                raise self.fail(line, "an assignment to a subscript")
        elif isinstance(node, ast.keyword):
            if node.arg is None or node.arg.startswith("__"):
                raise self.fail(line, "a ** argument or a dunder keyword")
        else:
            raise self.fail(line, f"a {type(node).__name__} in a kernel")

    def _name(self, node: ast.Name, bound: set[str], roots: set[int]) -> None:
        n = node.id
        if n in self.modules:
            if id(node) not in roots:
                raise self.fail(node.lineno, f"module {n} used as a value (only as {n}.<name>)")
        elif n not in bound and n not in self.functions and n not in BUILTINS:
            raise self.fail(
                node.lineno,
                f"the name {n!r}, which is not a parameter, a local, a kernel function, an imported module "
                "or a builtin Triton accepts",
            )

    def _attribute(self, node: ast.Attribute) -> None:
        attrs: list[str] = []
        root: ast.expr = node
        while isinstance(root, ast.Attribute):
            attrs.insert(0, root.attr)
            root = root.value
        line = node.lineno
        if any(a.startswith("_") for a in attrs):
            raise self.fail(line, f"the attribute {'.'.join(attrs)} (a private or dunder name)")
        if not isinstance(node.ctx, ast.Load):
            raise self.fail(line, "an assignment to an attribute")
        if isinstance(root, ast.Name) and root.id in self.modules:
            if not self._module_attrs(root.id, attrs):
                raise self.fail(line, f"{root.id}.{'.'.join(attrs)}, which is not Triton's language")
        elif isinstance(root, ast.Name) and root.id in self.functions:
            raise self.fail(line, f"an attribute of kernel function {root.id}")
        else:
            for a in attrs:
                if a not in VALUE_ATTRS:
                    raise self.fail(line, f"the attribute {a!r}, which is not a member of Triton's tensors or dtypes")

    def _module_attrs(self, module: str, attrs: list[str]) -> bool:
        first, rest = attrs[0], attrs[1:]
        if module == "tl":
            if first in TL_DTYPES:
                return all(a in VALUE_ATTRS for a in rest)
            return first in TL_NAMES and (not rest or (len(rest) == 1 and rest[0] in TL_MEMBERS.get(first, ())))
        if module == "triton":
            return not rest and first in TRITON_NAMES
        return not rest  # math.<name>

    def _string(self, node: ast.Constant | ast.JoinedStr) -> None:
        if isinstance(node, ast.JoinedStr) or isinstance(node.value, (str, bytes)):
            if node.lineno != node.end_lineno:
                raise self.fail(node.lineno, "a string spanning lines")


def _is_triton_jit(e: ast.expr) -> bool:
    return isinstance(e, ast.Attribute) and e.attr == "jit" and isinstance(e.value, ast.Name) and e.value.id == "triton"
