"""The sections of a toy family's report (the ``report_sections`` hook's module; plain data)."""
SECTIONS = (
    dict(key="setting", title="Configuration", source="toy", blocks=(
        "p:A grouped-query-attention model with a dense SwiGLU FFN in every layer.", "estimate")),
    dict(key="notation", title="Notation", source="toy", blocks=("notation",)),
    dict(key="parameters", title="Parameters", source="toy", blocks=(
        "p:A stage holds {sym:L_d} layers; {term:params.gqa} is one layer's attention.", "terms"),
         prefixes=("params",)),
    dict(key="static", title="Per device", source="toy", blocks=("terms",), prefixes=("static",), at_stage=True),
    dict(key="zero", title="ZeRO", source="toy", blocks=("terms",), prefixes=("zero",), at_stage=True),
    dict(key="activations", title="Activations", source="toy", blocks=(
        "p:One layer keeps {term:act.gqa.layer} without recomputation.", "terms"), prefixes=("act",),
         at_stage=True, parts=True),
    dict(key="overheads", title="Buffers and fragmentation", source="Sec. 6", blocks=("overheads", "terms"),
         prefixes=("overhead",)),
    dict(key="other", title="Other terms", source="memsym", blocks=("terms",), prefixes=("",), at_stage=True),
)
