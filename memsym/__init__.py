"""memsym: the application (command line, report) and the public Python API.

Importing this package is instant: sympy, numpy and the derivations are imported by the
functions that need them.
"""
__version__ = "0.1.0"
