"""memsym's engine: notation machinery, terms, exact and lambdified numbers, rendering,
formula parsing, sensitivity algebra, the search kernel, atomic files.  It knows no model.
"""
