"""The typed errors every layer raises, and the warning a backend gives when it falls back. Dependency-free so
the runtime can use them."""

from __future__ import annotations


class AotcError(Exception):
    """Base of every error aotc raises on purpose."""


class GuardError(AotcError):
    """Inputs break a shape guard of the compiled model."""


class TraceError(AotcError):
    """The model can't be captured; the message names the user's file:line."""


class ArtifactError(AotcError):
    """A file is not a valid aotc artifact (truncated, corrupted, wrong version)."""


class ModelError(AotcError):
    """An input model file (e.g. ONNX) is unreadable or malformed: not a model, a missing initializer."""


class ShapeError(AotcError):
    """Shapes or dtypes given to an op don't fit its rule."""


class VerifyError(AotcError):
    """A graph breaks an IR invariant; names the node and the stage."""


class UnsupportedError(AotcError):
    """An op or feature aotc does not handle (e.g. an unknown ONNX operator)."""


class ExecError(AotcError):
    """A value computed while running is invalid (e.g. a gather index out of range)."""


class FallbackWarning(RuntimeWarning):
    """A backend failed on a call whose inputs passed aotc's checks, and a slower one computed it instead."""
