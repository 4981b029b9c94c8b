"""The paper itself as checks: its printed numbers and formulas (reference, formulas), their reproduction
and the verification of a user's formula against a term."""
