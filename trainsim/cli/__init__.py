"""One module per `trainsim` subcommand; each exposes ``register(subparsers)``."""

COMMANDS = ("predict", "plan", "report", "calibrate", "execute", "validate", "regress", "collective")
