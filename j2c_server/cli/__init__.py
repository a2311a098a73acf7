"""The ``j2c`` command line: a thin front end over the pipeline and registry (see subcommands)."""

from __future__ import annotations

import click

from j2c_server.cli.failures import J2CGroup


@click.group(cls=J2CGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="j2c", prog_name="j2c")
def main() -> None:
    """Send a project and its venv to a GPU cluster, follow its logs, collect its results."""


def _add_commands() -> None:
    from j2c_server.cli.build import build
    from j2c_server.cli.config_cmd import config
    from j2c_server.cli.gc import gc
    from j2c_server.cli.image_cmd import image
    from j2c_server.cli.jobs import cancel, list_jobs, logs, remove, status
    from j2c_server.cli.results_cmd import results
    from j2c_server.cli.submit import pack, submit
    from j2c_server.cli.sweep_cmd import sweep
    from j2c_server.cli.usage_cmd import usage
    from j2c_server.cli.wait import wait

    for command in (submit, pack, build, status, logs, cancel, remove, list_jobs, config):
        main.add_command(command)
    for command in (usage, gc, image, wait, results, sweep):
        main.add_command(command)


_add_commands()
