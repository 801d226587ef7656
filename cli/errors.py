"""How the CLI turns exceptions into one stderr line and an exit code.

Exit codes: 0 success, 1 user error (bad file, bad option value, any aotc error
about the user's model or artifact), 2 command-line usage error (click's own),
3 internal error (a bug in aotc: an unexpected exception or a graph that fails
verification). ``--debug`` adds the traceback; the exit code stays the same.
"""

from __future__ import annotations

import traceback
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import click

from aotc.errors import AotcError, ArtifactError, VerifyError
from aotc_cli.user_error import UserError

EXIT_OK = 0
EXIT_USER = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3

_DEBUG_KEY = "aotc.debug"

F = TypeVar("F", bound=Callable[..., Any])


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_root().meta[_DEBUG_KEY] = True


def debug_option(f: F) -> F:
    """``--debug``, accepted both before the command name and after it."""
    return click.option(
        "--debug",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_debug,
        help="Show the full traceback when something fails.",
    )(f)


def classify(exc: BaseException) -> tuple[int, str]:
    """(exit code, one-line message) for an exception that escaped a command."""
    if isinstance(exc, UserError):
        return EXIT_USER, f"error: {exc}"
    if isinstance(exc, VerifyError) and not isinstance(exc, ArtifactError):
        # the compiler produced a broken graph: that is aotc's bug, not the user's (a file's broken plan is the file's)
        return EXIT_INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
    if isinstance(exc, AotcError):
        # one form for every error of the user's input: "error: " and aotc's message, which names the input, the
        # value and what was expected (the Python API raises the typed exception: GuardError, ArtifactError, ...)
        return EXIT_USER, f"error: {exc}"
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return EXIT_USER, f"error: {exc.strerror or exc}{where}"
    return EXIT_INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


def _show_warning(message: Warning | str, category: type[Warning], *_args: Any, **_kwargs: Any) -> None:
    """A warning as one ``warning:`` line on stderr, like the ``error:`` lines: aotc's warnings speak to the user
    (a defaulted dim range, a kernel that falls back), so the Python file and line they were raised at are noise."""
    click.echo(f"warning: {message}", err=True)


class AotcGroup(click.Group):
    """A click group that reports every command's failure the same way."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("default", module="aotc")  # aotc's own warnings always reach the user
                warnings.showwarning = _show_warning
                return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:
            code, message = classify(exc)
            if ctx.meta.get(_DEBUG_KEY):
                click.echo("".join(traceback.format_exception(exc)).rstrip(), err=True)
            click.echo(message, err=True)
            if code == EXIT_INTERNAL and not ctx.meta.get(_DEBUG_KEY):
                click.echo("This is a bug in aotc; rerun with --debug to see the traceback.", err=True)
            ctx.exit(code)
