"""Evaluators generated from the terms (``python -m derivations.generate``; committed, never edited by hand).

``<family>.json`` holds every term as an exact polynomial and the activation tensors as decision
tables; ``<family>.py`` the few non-polynomial symbols, the schedules' in-flight counts and the
per-device assembly.
:mod:`derivations.evaluate` reads them without sympy.  ``<family>_search.py`` holds the search's numpy
kernels of every structure, each distinct one once (:mod:`derivations.analyses.kernels` runs them, without
sympy); structures whose kernels are all equal share a name (``SEARCH_KERNELS``: the calculator page
prints one kernel per name)."""

#: {structure (-flash: under flash attention): the name of its search kernels}
SEARCH_KERNELS = {'q0b0t0': 'deepseek_search_q0b1t0', 'q0b0t0-flash': 'deepseek_search_q0b1t0_flash', 'q0b0t1': 'deepseek_search_q0b1t1', 'q0b0t1-flash': 'deepseek_search_q0b1t1_flash', 'q0b1t0': 'deepseek_search_q0b1t0', 'q0b1t0-flash': 'deepseek_search_q0b1t0_flash', 'q0b1t1': 'deepseek_search_q0b1t1', 'q0b1t1-flash': 'deepseek_search_q0b1t1_flash', 'q1b0t0': 'deepseek_search_q1b1t0', 'q1b0t0-flash': 'deepseek_search_q1b1t0_flash', 'q1b0t0i1': 'deepseek_search_q1b1t0i1', 'q1b0t0i1-flash': 'deepseek_search_q1b1t0i1_flash', 'q1b0t1': 'deepseek_search_q1b1t1', 'q1b0t1-flash': 'deepseek_search_q1b1t1_flash', 'q1b0t1i1': 'deepseek_search_q1b1t1i1', 'q1b0t1i1-flash': 'deepseek_search_q1b1t1i1_flash', 'q1b1t0': 'deepseek_search_q1b1t0', 'q1b1t0-flash': 'deepseek_search_q1b1t0_flash', 'q1b1t0i1': 'deepseek_search_q1b1t0i1', 'q1b1t0i1-flash': 'deepseek_search_q1b1t0i1_flash', 'q1b1t1': 'deepseek_search_q1b1t1', 'q1b1t1-flash': 'deepseek_search_q1b1t1_flash', 'q1b1t1i1': 'deepseek_search_q1b1t1i1', 'q1b1t1i1-flash': 'deepseek_search_q1b1t1i1_flash'}
