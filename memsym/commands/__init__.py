"""Subcommands of ``memsym``; one module each, listed in the order ``--help`` shows them."""
COMMANDS = ["estimate", "params", "reproduce", "report", "terms", "verify", "sensitivity", "fit", "search", "compare"]
