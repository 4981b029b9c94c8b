"""Subcommands of ``memsym``, one module each; ``COMMANDS`` (their one-line help, in ``--help``'s order) lets
``memsym --help`` list them without importing any.  A command imports what it runs inside the function running it."""
COMMANDS = {
    "estimate": "per-device memory breakdown of one pipeline stage",
    "params": "parameters per layer kind, per stage and in total (Tables 3-4)",
    "reproduce": "recompute every printed number of the paper and judge each",
    "page": "write an interactive calculator page: one self-contained HTML file, offline",
    "report": "regenerate the paper's equations and tables (tex, pdf, md, html, notebooks)",
    "terms": "list every term id with its meaning and provenance",
    "verify": "check a hand-derived formula against a term: equal, or the exact difference",
    "sensitivity": "derivatives and elasticities of the per-device memory, in closed form",
    "fit": "largest micro-batch or longest sequence that fits the HBM, solved in closed form",
    "search": "enumerate every valid layout for a GPU count and list those that fit",
    "compare": "the paper, Megatron-LM and ModelZoo conventions side by side, and a waterfall of the assumptions "
               "between them",
    "runs": "predicted vs measured per-GPU memory of published training runs (paper/runs.toml)",
    "trace": "measure a real implementation's saved tensors on CPU (transformers, Megatron-Core) against a preset",
}
