"""Model families: each module declares one family (its symbols, parameter matrices, tensors kept for
backward, Hugging Face mapping and report text); see derivations/families/deepseek.py."""
