"""The step-time model (issue 29): how long one training step takes on a layout, from published rates.

Built like the memory terms: sympy expressions with their sources (:mod:`derivations.steptime.model`),
printed into numpy evaluators by ``python -m derivations.generate`` (``derivations/generated/deepseek_time.py``)
and evaluated without sympy (:mod:`derivations.steptime.evaluate`) for ``memsym search`` (ranking),
``memsym estimate --time`` and the page.  Its inputs are the GPU's published peak rates and link
bandwidths (``derivations/config/gpus.toml``), where each parallel group's ranks sit (Megatron-Core's rank
order, :mod:`derivations.steptime.placement`), the schedule's bubble (DeepSeek-V3 report, Table 2) and
named overlap switches; nothing is fitted to a measured run.

Its efficiencies are the published tables' (``--efficiency published``, the default: ``efficiency.py``), or the
peak (``--efficiency peak``, an upper bound) times one named factor (``--gemm-efficiency``).  What it leaves out
is said where each piece is built: host-side (kernel launch) overhead, an achieved fraction of the HBM
bandwidth for the memory-bound operations, the MTP modules' and the indexer's communication, congestion and
stragglers.
"""
