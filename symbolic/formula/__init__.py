"""Typed formulas: a whitelist lexer and parser of formulas written in the registered
notation (plain text or LaTeX; never evaluated), assumptions, and the comparison of two
expressions by monomial.  Generic: the notation and any conventions come from the caller."""
from .assumptions import parse_assumptions, substitute, symbol_of
from .compare import Comparison, Leaf, carriers, compare, expanded_size, monomial_rank, multiples, symbol_rank
from .lexer import FormulaError, closest_symbols, normalise, spellings, strip_label, tokenize
from .parser import MAX_DEPTH, MAX_LENGTH, MAX_MONOMIALS, Parsed, parse, parse_formula, plain, sum_denominators

__all__ = ["Comparison", "FormulaError", "Leaf", "MAX_DEPTH", "MAX_LENGTH", "MAX_MONOMIALS", "Parsed", "carriers",
           "closest_symbols", "compare", "expanded_size", "monomial_rank", "multiples", "normalise", "parse",
           "parse_assumptions", "parse_formula", "plain", "spellings", "strip_label", "substitute",
           "sum_denominators", "symbol_of", "symbol_rank", "tokenize"]
