"""memsym's engine: notation, terms, configurations, numbers, rendering, checks.

Importing this package defines symbols only; derivations live in ``derivations``.
"""
__version__ = "0.1.0"
