"""The ``aotc`` command: compile, run, inspect and export models.

Exit codes: 0 success, 1 user error, 2 usage error, 3 internal error (see errors.py).
"""

from __future__ import annotations

import click

import aotc
from aotc_cli.compile_cmd import compile_command
from aotc_cli.errors import AotcGroup, debug_option
from aotc_cli.export_cmd import export_command
from aotc_cli.export_triton_cmd import export_triton_command
from aotc_cli.generate_cmd import generate_command
from aotc_cli.inspect_cmd import inspect_command
from aotc_cli.run_cmd import run_command
from aotc_cli.serve_cmd import serve_command
from aotc_cli.sign_cmd import keygen_command, sign_command


@click.group(cls=AotcGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(aotc.__version__, prog_name="aotc")
@debug_option
def cli() -> None:
    """aotc: compile a model ahead of time into one verified artifact, then run, inspect, export or sign it.

    Exit codes: 0 ok, 1 error in your input (message on stderr), 2 bad command line,
    3 internal error (a bug in aotc; --debug shows the traceback)."""


cli.add_command(compile_command)
cli.add_command(run_command)
cli.add_command(inspect_command)
cli.add_command(export_command)
cli.add_command(serve_command)
cli.add_command(export_triton_command)
cli.add_command(sign_command)
cli.add_command(keygen_command)
cli.add_command(generate_command)


def main() -> None:
    cli(prog_name="aotc")


if __name__ == "__main__":
    main()
