"""Evaluators generated from the terms (``python -m derivations.generate``; committed, never edited by hand).

``<family>.json`` holds every term as an exact polynomial and the activation tensors as decision
tables; ``<family>.py`` the few non-polynomial symbols, the schedules' in-flight counts and the
per-device assembly.
:mod:`derivations.evaluate` reads them without sympy."""
