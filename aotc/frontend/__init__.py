"""The tracing frontend (imported by aotc.nn, aotc.functional, the importers and the compiler; imports aotc.ir).

The frontend: the tracing Tensor, nn modules, functional ops, Dim/TensorSpec, trace() and compile().

``tensor`` is imported first: the op helper modules and the Tensor class refer to each other, and
loading the class before any helper keeps that cycle well-ordered whichever module a user imports.
"""

from aotc.frontend import tensor as _tensor  # noqa: F401
