"""Typed formulas: a whitelist lexer and parser of formulas written in the registered
notation (plain text or LaTeX; never evaluated), assumptions, and the comparison of two
expressions by monomial.  Generic: the notation and any conventions come from the caller."""
# ruff: noqa: F401 (the package's names, re-exported)
from .assumptions import parse_assumptions, substitute, symbol_of
from .compare import Comparison, Leaf, carriers, compare, expanded_size, monomial_rank, multiples, symbol_rank
from .lexer import FormulaError, closest_symbols, normalise, spellings, strip_label, tokenize
from .parser import MAX_DEPTH, MAX_LENGTH, MAX_MONOMIALS, Parsed, parse, parse_formula, plain, sum_denominators
