"""One module per command, as ruff's `commands/`: each takes its arguments (`hlogap.cli.args`),
builds the library's options from them (`AuditOptions`, `CheckOptions`) and calls the library.
Library modules are imported inside the commands: `hlogap --help` stays instant."""
