"""The ``j2c`` command line: a thin front end over the pipeline and registry (see subcommands)."""
