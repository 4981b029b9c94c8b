"""The step-time model (issue 29): one training step's seconds on a layout, from published rates and bandwidths
(derivations/config/gpus.toml), never fitted.  Sympy expressions (:mod:`.model`) printed by ``python -m
derivations.generate`` into ``derivations/generated/deepseek_time.py``, evaluated without sympy (:mod:`.evaluate`)
by ``memsym search``, ``estimate --time`` and the page; ranks placed as Megatron-Core orders them
(:mod:`.placement`), efficiencies the published tables' (:mod:`.efficiency`) or one named factor.  Left out:
launch overheads, an achieved HBM fraction, the MTP modules' and indexer's communication, congestion, stragglers.
"""
