"""Analyses of the assembled terms: fit (budget solving), search, sensitivity, compare, counts and runs."""
