"""The sections of a DeepSeek-V4 report (memsym/report/sections.py reads ``SECTIONS``): V4's own equations, in the
order a reader builds the memory of one device: the configuration, the notation, V4's matrices, the parameters of
a layer and of a stage, the per-device parameters, ZeRO, the activations (per kind of sublayer, as transformers
keeps them) and the Sec. 6 overheads.  Plain data."""

SECTIONS = (
    dict(key="setting", title="Configuration", source="transformers 5.24 DeepseekV4Config", blocks=(
        "p:The model, parallel layout and training settings of this report, and the resulting memory of one device "
        "of the chosen stage. Every number below is evaluated exactly from the terms (integers and rationals); GiB "
        "means 2^30 bytes.", "estimate")),
    dict(key="notation", title="Notation", source="memsym (DeepSeek-V4 symbols beside the paper's)", blocks=(
        "p:DeepSeek-V4 is not MLA: every query head and the one shared key-value head have {sym:d_a} dimensions, the "
        "query is compressed to {sym:d_cq}, the output projection has {sym:g_O} groups of rank {sym:d_O}, each token "
        "carries {sym:n_hc} residual streams mixed by {sym:t_S} Sinkhorn iterations, and a CSA (HCA) layer compresses "
        "every {sym:m_C} ({sym:m_H}) tokens into one key-value entry.", "notation")),
    dict(key="matrices", title="Attention, compressor, hyper-connection and expert matrices",
         source="transformers 5.24 models/deepseek_v4/modeling_deepseek_v4.py", blocks=(
             "p:Each module of one layer, matrix by matrix, as transformers builds it; the head-indexed matrices are "
             "split by TP, the rest replicated (transformers itself replicates the attention).", "terms"),
         prefixes=("params.attn", "params.compressor", "params.hc", "params.norm", "params.expert",
                   "params.dense_ffn", "params.router", "params.embedding", "params.head")),
    dict(key="parameters", title="Parameters per layer and per stage", source="memsym", blocks=(
        "p:Every V4 layer is a MoE layer ({sym:L_m} of them in a stage); a stage's {sym:L_C} CSA and {sym:L_H} HCA "
        "layers add their compressors, and the last stage the hyper-connection head. The checkpoint accounting adds "
        "the score-correction bias of the {sym:L_R} learned-router layers (hash-routed layers have none).", "terms"),
         prefixes=("params",)),
    dict(key="static", title="Static parameters per device", source="memsym", blocks=(
        "p:Per-device terms at the layout and at the chosen stage's composition.", "terms"),
         prefixes=("static",), at_stage=True),
    dict(key="zero", title="ZeRO", source="the paper's Sec. 4 rules", blocks=(
        "p:Non-MoE parameters {term:static.device.non_moe} (and their gradients and optimizer states) are sharded "
        "over {sym:DP}, MoE parameters {term:static.device.moe} over {sym:EDP}.", "terms"), prefixes=("zero",),
         at_stage=True),
    dict(key="activations", title="Activations", source="transformers 5.24, traced (paper/traces/V4.md)", blocks=(
        "p:Per-layer terms, tensor by tensor as transformers keeps them for backward: {term:act.attn.layer} (every "
        "layer's hyper-connection, attention over s keys and stream mix), what a CSA layer adds "
        "{term:act.csa.layer} and an HCA layer {term:act.hca.layer} (their compressors and the compressed keys), "
        "{term:act.moe.layer} (hyper-connection, router and experts) and the head {term:act.head}. The sliding window "
        "appears in no term: eager attention computes the full s x (s + T) scores.", "terms"),
         prefixes=("act",), at_stage=True, parts=True),
    dict(key="overheads", title="Buffers and fragmentation", source="Sec. 6", blocks=(
        "p:The paper's ranges: fragmentation adds 5% to 30% of the allocated memory, communication buffers about 0.8 "
        "to 2 GiB per device.", "overheads", "terms"), prefixes=("overhead",)),
    dict(key="other", title="Other terms", source="memsym", blocks=("terms",), prefixes=("",), at_stage=True),
)
