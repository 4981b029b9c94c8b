"""Conventions: modelling assumptions as named switches (the paper's choices, Sections 3-5, and each
framework's, read from its sources or traced: paper/traces/), and every switch as each source sets it
(``convention_presets/*.toml``)."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, make_dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from symbolic.errors import ConfigError


@dataclass(frozen=True)
class SwitchSpec:
    """One modelling assumption: ``values`` with the paper's choice first; ``tokens`` the
    term-id token of each other value (``act.layer.dispatch``); ``side`` what it changes
    ('activations', 'weights', 'both' or 'device': a per-device term beside both, derivations/assembly/runtime.py);
    ``help`` the option's text; ``label`` its name in ``memsym compare``'s table;
    ``exists`` the tensor tags it acts on: {tag: the values under which tensors with that tag exist}
    (the tags of the tensor lists: derivations/tensors.py, derivations/families/*/activations.py)."""

    name: str
    option: str
    values: Tuple[str, ...]
    tokens: Dict[str, str]
    side: str
    help: str
    paper: str = ""
    exists: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    label: str = ""

    @property
    def default(self) -> str:
        return self.values[0]


#: The switches, in the fixed order ``memsym compare`` flips them (attention, bytes per
#: parameter and MTP are switches too, kept in Training / the CLI; see CONVENTION_ORDER).
CONVENTION_SWITCHES: Dict[str, SwitchSpec] = {s.name: s for s in (
    SwitchSpec("routed_tokens", "--routed-tokens", ("paper", "dispatch"), {"dispatch": "dispatch"}, "activations",
               "routed token-copies one device's experts hold: paper ((N/EP) E_token = b s N_r/EP, Table 9) or "
               "dispatch (b s N_r/SP: the EP devices of an expert-parallel group each hold their own b s/SP tokens, "
               "so under balanced routing a device receives b s N_r/SP token-copies, EP/SP times the paper's; the "
               "count of every public estimator)", "(N/EP) E_token = b s N_r/EP token-copies per device",
               label="routed tokens per device"),
    SwitchSpec("router_tensors", "--router-tensors", ("full", "sp"), {"sp": "router-sp"}, "activations",
               "router logits and probabilities (4 b s N bytes): full (the paper: over the whole sequence) or sp "
               "(divided by SP: the router runs on the sequence-parallel shard)", "not divided by SP",
               label="router tensors"),
    SwitchSpec("shared_expert", "--shared-expert", ("replicated", "tp"), {"tp": "shared-tp"}, "both",
               "shared experts: replicated (the paper: N_s x 3 h h_E weights on every device and their gate/up/"
               "SwiGLU activations over all b s tokens) or tp (split by TP as Megatron shards them: weights / TP and "
               "those activations / TP; their all-gathered input is not split)", "replicated on every device",
               label="shared expert"),
    SwitchSpec("dropout_masks", "--dropout-masks", ("kept", "none"), {"none": "no-masks"}, "activations",
               "dropout masks (1 B per element: attention, after W^O, after every expert): kept (the paper, Sec. 5) "
               "or none (dropout off, as DeepSeek-V3 and Megatron's DeepSeek recipes train; then F.dropout(p=0) "
               "returns its input, so with the softmax in the activations' dtype the attention dropout output is the "
               "softmax output itself and is not counted twice)", "kept",
               label="dropout masks"),
    SwitchSpec("checkpoints", "--checkpoints", ("two", "one"), {"one": "one-checkpoint"}, "activations",
               "what full recomputation keeps per layer: two (the paper's M_2^A + M_2^E: the MLA and the MoE "
               "sublayer inputs and the routing decision) or one (the layer input only, as Megatron-LM and the "
               "estimators keep)", "two per layer plus the routing decision",
               label="full-recompute checkpoints"),
    SwitchSpec("swiglu", "--swiglu", ("separate", "fused", "offset-copy"), {"fused": "fused-swiglu",
                                                                              "offset-copy": "glu-offset"},
               "activations",
               "SwiGLU outputs kept: separate (the paper: activation and product, two tensors of h_E per token), "
               "fused (a fused SwiGLU kernel keeps its input and only the product, the down-projection input) or "
               "offset-copy (Megatron-Core's unfused glu, mlp.py: MLP.forward: activation(x_glu) * (x_linear + "
               "glu_linear_offset) also keeps the sum, a copy of the linear half: three tensors of h_E per token)",
               "activation and product kept",
               exists={"weighted": ("separate", "offset-copy")},
               label="SwiGLU outputs"),
    SwitchSpec("expert_outputs", "--expert-outputs", ("not-kept", "kept"), {"kept": "expert-outputs"},
               "activations",
               "routed experts' outputs: not-kept (the paper) or kept (the combine / un-permute step weights them by "
               "the router probabilities, whose gradient needs them: ModelZoo's un-permute all-to-all output)",
               "not kept",
               exists={"combine": ("kept",)},
               label="expert outputs"),
    SwitchSpec("latent_norms", "--latent-norms", ("not-kept", "kept"), {"kept": "latent-norms"}, "activations",
               "RMSNorm outputs of the MLA latents c_Q and c_KV (the up-projections' inputs): not-kept (the paper "
               "counts each latent once) or kept (beside the latents, as ModelZoo counts)", "not kept",
               exists={"latent_norm": ("kept",)},
               label="latent norm outputs"),
    SwitchSpec("latents", "--latents", ("full", "sp"), {"sp": "latents-sp"}, "activations",
               "the MLA latents c_Q and c_KV, their RMSNorm outputs and the norms' saved statistics: full (the "
               "paper: over the whole sequence, the down-projections' weights being replicated) or sp (divided by "
               "SP: Megatron-Core with Transformer Engine, Megatron-LM d98e8a64 transformer/multi_latent_attention.py "
               "MLASelfAttention.__init__ builds the down-projections as TELinear parallel_mode='duplicated' (TE "
               "tp_size 1, no input all-gather), so _qkv_down_projection runs them on the sequence-parallel shard "
               "([s/TP, b, q_lora_rank]); the up-projections, TELayerNormColumnParallelLinear with the latents' "
               "norms fused, save their local input, norm output and rsigma and all-gather the norm output for the "
               "GEMM only (Transformer Engine d0067d0d pytorch/module/layernorm_linear.py _LayerNormLinear.forward: "
               "ln_out_total freed after the GEMM, gathered again in the backward); the k RoPE part is gathered to "
               "the whole sequence and saved by no operation)", "over the whole sequence",
               label="MLA latents"),
    SwitchSpec("routing_state", "--routing-state", ("mask", "row-map"), {"row-map": "row-map"}, "activations",
               "routing state kept for backward: mask (the paper's routing choice, B_a b s N_r) or row-map "
               "(Megatron's int64 permutation row map, 8 b s N bytes; divided by SP with --router-tensors sp)",
               "routing choice B_a b s N_r",
               exists={"dispatch_mask": ("mask",), "row_map": ("row-map",)},
               label="routing state"),
    SwitchSpec("norm_storage", "--norm-storage", ("output", "fp32", "torch", "te"),
               {"fp32": "fp32-norms", "torch": "torch-norms", "te": "te-norms"}, "activations",
               "what each RMSNorm keeps: output (the paper: its input and output, the latents' norms as "
               "--latent-norms says) or fp32 (transformers' DeepseekV3RMSNorm.forward: an FP32 copy of its input "
               "(hidden_states.to(float32), saved by pow and mul), the FP32 rsqrt per row, the pre-weight value "
               "(saved by the weight multiply) and the output its consumer saves; the latents' norms too, which then "
               "keep the latents only as FP32 copies); torch (torch.rms_norm's composite, what Megatron-Core's "
               "local spec runs on CPU, torch/_decomp: as fp32 but the pre-weight value in FP32); te (Transformer "
               "Engine's fused RMSNorm, transformer_engine/pytorch/module/rmsnorm.py: its input, the FP32 rsigma per "
               "row, and the output its consumer saves)", "input and output",
               exists={"plain_head_norm": ("output", "te"), "fp32_norm": ("fp32", "torch"), "te_norm": ("te",)},
               label="RMSNorm storage"),
    SwitchSpec("softmax_dtype", "--softmax-dtype", ("activation", "fp32"), {"fp32": "fp32-softmax"}, "activations",
               "the attention softmax output: activation (the paper: B_a per element) or fp32 (transformers' "
               "eager_attention_forward: softmax(dtype=float32) keeps its FP32 output, 4 b n_h s^2, beside the "
               "B_a probabilities P V keeps; one storage when B_a = 4)", "B_a per element",
               label="softmax dtype"),
    SwitchSpec("router_state", "--router-state", ("paper", "transformers", "mcore"),
               {"transformers": "hf-router", "mcore": "mcore-router"},
               "activations",
               "router tensors kept: paper (logits and probabilities 2 B_a b s N, routing choice) or transformers "
               "(DeepseekV3TopkRouter.forward: an FP32 copy of its input (when B_a != 4; the weight is kept FP32 by "
               "from_config/from_pretrained with a dtype), the FP32 sigmoid scores, the int64 top-N_r indices, the "
               "FP32 normaliser and FP32 top-k weights; the group-limited top-k's indices and mask are freed during "
               "the forward, their nodes' outputs being dropped) or mcore (Megatron-Core's "
               "TopKRouter with sigmoid scores, expert bias and group-limited routing, moe_utils.py: "
               "topk_routing_with_score_function: the FP32 sigmoid output, the scores cast to B_a (none when B_a = 4 "
               "or under --router-dtype fp32), the int64 top-N_r indices, the top-k scores and their normaliser in "
               "the router dtype, at N_r > 1 only; group_limited_topk's bookkeeping is freed during the forward, only "
               "its indices being used)", "logits, probabilities, "
               "routing choice",
               exists={"paper_router": ("paper",), "hf_router": ("transformers",), "mcore_router": ("mcore",)},
               label="router tensors kept"),
    SwitchSpec("router_dtype", "--router-dtype", ("activation", "fp32"), {"fp32": "fp32-router"}, "activations",
               "the dtype of Megatron-Core's router logits and of the probabilities it hands on (its tensors under "
               "--router-state mcore and --experts alltoall, and the --aux-loss tensors; the paper's and the other "
               "inventories' router tensors keep their own dtypes): activation (the paper, "
               "Megatron-Core's default: B_a) or fp32 (moe_router_dtype='fp32', what the DeepSeek recipes set, "
               "Megatron-Bridge models/deepseek/deepseek_provider.py: router.py TopKRouter.gating computes the logits "
               "in FP32 (moe_utils.py RouterGatingLinearFunction, which saves its input and weight as they are), so "
               "the top-k probabilities, the dispatcher's and the experts' per-token-copy probabilities and the "
               "auxiliary loss's scores are FP32 and the scores are not cast to B_a). transformers' router is FP32 "
               "in its own code (DeepseekV3TopkRouter.forward)", "B_a",
               exists={"router_cast": ("activation",)},
               label="router dtype"),
    SwitchSpec("aux_loss", "--aux-loss", ("none", "seq", "global"), {"seq": "seq-aux", "global": "global-aux"},
               "activations",
               "the load-balancing loss Megatron-Core's router builds and what its backward keeps (transformers' "
               "DeepSeek models build none): none (the paper: DeepSeek-V3 "
               "balances by the expert bias), seq (Megatron-Core's seq_aux_loss, the DeepSeek recipes' "
               "moe_router_load_balancing_type, Megatron-Bridge deepseek_provider.py) or global (global_aux_loss): "
               "router.py TopKRouter.routing, _apply_seq_aux_loss / _apply_global_aux_loss; moe_utils.py "
               "compute_routing_scores_for_aux_loss (sigmoid scores and their per-token normaliser, in the router "
               "dtype), switch_load_balancing_loss_func (the tokens per expert, int64 per sequence and expert for "
               "seq, FP32 averaged per expert for global) and MoEAuxLossAutoScaler (the loss scalar)", "none",
               exists={"aux": ("seq", "global"), "aux_seq": ("seq",), "aux_global": ("global",)},
               label="load-balancing loss"),
    SwitchSpec("experts", "--experts", ("paper", "loop", "alltoall", "grouped"),
               {"loop": "expert-loop", "alltoall": "a2a", "grouped": "grouped-mm"},
               "activations",
               "routed experts' bookkeeping: paper (none beyond the expert tensors) or loop (transformers' "
               "DeepseekV3Experts.forward, eager: per token-copy the int64 (top-k position, token) index pair of "
               "torch.where, the FP32 routing weight, and index_add_'s source, the weighted output in B_a) or alltoall "
               "(Megatron-Core's MoEAlltoAllTokenDispatcher with unfused permute, moe_utils.py: permute/unpermute, "
               "and SequentialMLP applying the probabilities in the expert, mlp.py: MLP.forward per_token_scale: the "
               "bool routing map and the B_a probabilities transposed (b s N each), the int64 sorted token indices "
               "and the permuted B_a probabilities (b s N_r each), and per token-copy the activation product the "
               "probability multiply keeps, B_a h_E) or grouped (transformers' grouped_mm experts, integrations/"
               "moe.py: grouped_mm_experts_forward: per token-copy three int64 indices (perm // top_k, the tokens' "
               "gather; perm, the weights' gather; inv_perm, the un-sort) and the FP32 sorted routing weight, and "
               "the int32 per-expert offsets of grouped_mm, 4 N/EP bytes; the combine sums, keeping no source). "
               "transformers' own default is grouped: PreTrainedModel.get_correct_experts_implementation "
               "(modeling_utils.py) picks grouped_mm when the config names no experts_implementation, on a GPU as on "
               "CPU; on a GPU, _grouped_mm (integrations/moe.py, _can_use_grouped_mm) runs torch's grouped_mm "
               "kernel on compute capability 8.0+ (9.x only with torch <= 2.8), else transformers' "
               "grouped_mm_fallback op, which keeps the same input and offsets; loop is experts_implementation "
               "'eager', what the transformers preset models",
               "no bookkeeping tensors",
               exists={"loop": ("loop",), "a2a": ("alltoall",), "grouped": ("grouped",)},
               label="expert implementation"),
    SwitchSpec("shared_input", "--shared-input", ("own", "router"), {"router": "shared-input-once"},
               "activations",
               "the shared experts' input: own (the paper: 3 b s h per shared expert, input and mask) or router (the "
               "same storage as the router's and routed experts' input, the MoE RMSNorm output, counted once)",
               "kept per shared expert",
               exists={"own_shared_input": ("own",)},
               label="shared experts' input"),
    SwitchSpec("value_storage", "--value-storage", ("copy", "kv-view"), {"kv-view": "v-view"}, "activations",
               "v as P V keeps it: copy (the paper: B_a b s d_v n_h) or kv-view (transformers: v is a view of the "
               "kv_b_proj output; at b = 1 or with one head on the device matmul's reshape is a view and keeps that "
               "whole storage, B_a b s (d_h + d_v) n_h, else a contiguous copy of v)", "B_a b s d_v n_h",
               exists={"v_copy": ("copy",), "v_view": ("kv-view",)},
               label="v storage"),
    SwitchSpec("head_state", "--head-state", ("paper", "transformers", "mcore", "torchtitan"),
               {"transformers": "hf-head", "mcore": "mcore-head", "torchtitan": "tt-head"}, "activations",
               "what the head, loss and embedding keep: paper (logits and the FP32 loss softmax) or transformers "
               "(DeepseekV3ForCausalLM.forward + ForCausalLMLoss: no logits (upcast, not kept), the FP32 "
               "log-softmax, the int64 shifted labels and a 4-byte total weight; the embedding's int64 input ids and "
               "the RoPE cos and sin tables, B_a s d_h^R each, shared by all layers) or mcore (GPTModel."
               "compute_language_model_loss + tensor_parallel/cross_entropy.py: VocabParallelCrossEntropy: no logits "
               "(an FP32 copy is the loss's input), the FP32 softmax, the bool target mask and int64 masked targets "
               "(b s each); the embedding's int64 input ids) or torchtitan (a compiled loss, train.py: "
               "torch.compile of cross_entropy_loss: the B_a logits, its input, and FP32 per-row statistics "
               "instead of an FP32 softmax; the int64 labels and input ids)", "logits and FP32 softmax",
               # mcore_ckpt: tensors of Megatron-Core's own checkpointing (the head state says the framework is it)
               exists={"mcore_head": ("mcore",), "mcore_ckpt": ("mcore",),
                       "ids": ("transformers", "mcore", "torchtitan"),
                       "paper_head": ("paper", "torchtitan"), "hf_head": ("transformers",),
                       "eager_loss": ("paper", "transformers", "mcore"), "tt_head": ("torchtitan",)},
               label="head and loss"),
    SwitchSpec("ce_backward", "--ce-backward", ("none", "cast"), {"cast": "ce-cast"}, "activations",
               "the cross-entropy backward's transient at the last stage's peak: none (the paper: only tensors kept "
               "for backward) or cast (Megatron-Core, tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy."
               "backward and fusions/fused_cross_entropy.py calculate_gradients: the FP32 softmax is reused in place "
               "as the logits' gradient and cast to the logits' B_a dtype while it is still held, B_a b s v/(TP CP) "
               "more for one micro-batch; the forward's upcast of the logits holds as much; measured on CPU, "
               "paper/transients/ce-backward.toml)", "not counted",
               exists={"ce_cast": ("cast",)},
               label="cross-entropy backward"),
    SwitchSpec("causal_mask", "--causal-mask", ("none", "per-layer"), {"per-layer": "causal-mask"}, "activations",
               "the causal mask of eager attention: none (the paper: implicit) or per-layer (Megatron-Core's local "
               "DotProductAttention: FusedScaleMaskSoftmax.forward_torch_softmax builds get_default_causal_mask(s), "
               "a bool s x s, each call, kept by masked_fill_; s^2 bytes per layer)", "not kept",
               exists={"causal_mask": ("per-layer",)},
               label="causal mask"),
    SwitchSpec("mtp_activations", "--mtp-activations", ("none", "last-stage"), {"last-stage": "mtp"}, "activations",
               "the D multi-token-prediction modules (DeepSeek-V3 Sec. 2.2; the model's num_nextn_predict_layers) in "
               "training: none (the paper trains none) or last-stage (Megatron-Core builds them on the last pipeline "
               "stage, transformer/multi_token_prediction.py: MultiTokenPredictionLayer; each keeps one transformer "
               "layer of the decoder's last spec, its enorm, hnorm and final norm, eh_proj's 2h input, its share of "
               "the head input and its own loss; its weights are not added: see --mtp)", "no MTP module trained",
               exists={"mtp": ("last-stage",)},
               label="MTP activations"),
    SwitchSpec("rope_tables", "--rope-tables", ("none", "per-layer", "shared"),
               {"per-layer": "rope-layer", "shared": "rope-shared"}, "activations",
               "RoPE tables kept: none (the paper), per-layer (Megatron-Core's unfused apply_rotary_pos_emb, "
               "models/common/embeddings/rope_utils.py: _apply_rotary_pos_emb_bshd casts cos and sin to B_a per call, "
               "for q and for k: 4 B_a s d_h^R per layer) or shared (Transformer Engine's fused RoPE keeps the FP32 "
               "frequencies, one s d_h^R table that RotaryEmbedding.forward caches for every layer: outside the "
               "layers)", "not kept",
               exists={"rope_layer": ("per-layer",), "rope_shared": ("shared",)},
               label="RoPE tables"),
    SwitchSpec("inventory", "--inventory", ("paper", "modelzoo"), {"modelzoo": "modelzoo-inventory"},
               "activations",
               "per-tensor list: paper (Sec. 5) or modelzoo (NVIDIA Megatron-MoE-ModelZoo's: latents on the "
               "sequence-parallel shard with the kv norm output unsplit, no MoE RMSNorm output, router "
               "probabilities without logits, the shared experts' input kept once); the other switches still apply",
               "Sec. 5's tensors",
               exists={"paper_only": ("paper",), "modelzoo_only": ("modelzoo",)},
               label="per-tensor inventory"),
    SwitchSpec("expert_tp", "--expert-tp", ("split", "modelzoo"), {"modelzoo": "mz-etp"}, "activations",
               "expert tensor parallelism in the routed experts' activations: split (the paper's rule: each expert's "
               "intermediates divided by ETP) or modelzoo (the ModelZoo script's rule: the permuted tokens "
               "multiplied by ETP, fc1 and activation outputs not divided by ETP)", "intermediates divided by ETP",
               label="expert TP rule"),
    SwitchSpec("selective", "--selective", ("core-attention", "torchtitan-op"), {"torchtitan-op": "tt-op"},
               "activations",
               "what --recompute selective saves: core-attention (Megatron's selective recomputation, Korthikanti et "
               "al. 2022: the core attention recomputed) or torchtitan-op (torchtitan's op-level selective "
               "checkpointing with FlexAttention and the model not compiled, derivations/activations/op_sac.py: the "
               "attention recomputed whole, the MoE saving only its router gate's and shared w3's matmul outputs and "
               "its two all-to-all outputs)", "the core attention recomputed",
               exists={"sac_tt": ("torchtitan-op",)}, label="selective policy"),
    SwitchSpec("runtime_buffers", "--runtime-buffers", ("none", "te"), {"te": "te-workspaces"}, "device",
               "buffers the framework keeps on every device, counted in the allocated peak: none (the paper) or te "
               "(Megatron-Core with Transformer Engine on Hopper: TE's cuBLAS workspace of 32 MiB + 1 KiB, one more "
               "per grouped-GEMM stream (4), and PyTorch's 32 MiB cuBLAS workspace; derivations/assembly/runtime.py)",
               "not counted",
               label="runtime buffers"),
    SwitchSpec("rank", "--rank", ("stage", "megatron", "modelzoo", "fsdp2", "mfsdp"),
               {"megatron": "megatron", "modelzoo": "mz-rank", "fsdp2": "fsdp2", "mfsdp": "mfsdp"},
               "weights",
               "the rank whose parameters are reported: stage (the paper: one device of the --stage pipeline "
               "stage, Table 6), megatron (Megatron-LM theoretical_memory_usage.py's most-loaded shard: the TP-split "
               "and replicated parameters of an average stage, every MLA matrix and norm split by TP, the shared "
               "experts with the dense parameters, sharded over DP) or modelzoo (the ModelZoo script's rank: every "
               "layer of the stage counted as a MoE layer, attention projections and shared experts / TP, routed "
               "experts / (EP ETP); no embedding, head, norms or router) or fsdp2 (torchtitan's FSDP2: one device "
               "of the stage, the router and shared experts sharded with the block over DP CP, one FP32 parameter "
               "copy, the unsharded blocks, gradients and reduce-scatter input at the step's peak; "
               "derivations/assembly/fsdp.py) or mfsdp (Megatron-FSDP under ZeRO-3: one device of the stage with the "
               "non-unit bucket, embedding, final norm and output layer, kept gathered; derivations/assembly/fsdp.py)",
               "one device of a pipeline stage",
               label="rank reported"),
)}

#: The order ``memsym compare`` flips the switches from ``paper`` to a preset (documented
#: there): activations first (largest first in the paper's reading), then the weight side.
CONVENTION_ORDER = ("routed_tokens", "attention", "router_tensors", "shared_expert", "dropout_masks", "checkpoints",
                    "swiglu", "expert_outputs", "latent_norms", "latents", "routing_state", "norm_storage",
                    "softmax_dtype", "router_state", "router_dtype", "aux_loss", "experts", "shared_input",
                    "value_storage",
                    "head_state", "ce_backward", "causal_mask", "selective",
                    "rope_tables", "mtp_activations", "expert_tp", "bytes_per_param", "rank", "runtime_buffers",
                    "mtp", "inventory")

#: Bytes per parameter (Table 7 symbols) and the smallest ZeRO stage of each convention:
#: the paper's 2/4/4/2/2; FP32 moments 2/4/4/4/4; Megatron's distributed optimizer, FP32
#: moments sharded over the data-parallel ranks (ZeRO-1): 6 + 12/d bytes per parameter.
BYTES_CONVENTIONS: Dict[str, Tuple[Dict[str, int], int]] = {
    "paper": ({"B_w": 2, "B_g": 4, "B_m": 4, "B_1": 2, "B_2": 2}, 0),
    "fp32-moments": ({"B_w": 2, "B_g": 4, "B_m": 4, "B_1": 4, "B_2": 4}, 0),
    "distributed": ({"B_w": 2, "B_g": 4, "B_m": 4, "B_1": 4, "B_2": 4}, 1),
}
#: The ZeRO stage a --rank is: FSDP (torchtitan's FSDP2, Megatron-FSDP under ZeRO-3) shards the parameters, gradients
#: and optimizer states (derivations/assembly/fsdp.py); a lower --zero typed contradicts it, none typed is raised.
RANK_ZERO: Dict[str, int] = {"fsdp2": 3, "mfsdp": 3}
BYTES_HELP = ("bytes per parameter: paper (Table 7: BF16 weights, FP32 gradients and master copy, BF16 moments, "
              "2/4/4/2/2), fp32-moments (2/4/4/4/4) or distributed (Megatron's distributed optimizer: FP32 moments "
              "and the optimizer states sharded over the data-parallel ranks, ZeRO-1: 6 + 12/d bytes per parameter); "
              "sets --optimizer-dtype and (distributed) --zero 1 unless typed")
MTP_HELP = ("count the parameters of the model's D multi-token-prediction modules (DeepSeek-v3: 1; the paper counts "
            "none): with --rank stage on the last stage, where Megatron-Core builds them (gpt_model.py: mtp_process), "
            "each as one more MoE layer, with the embedding copy that stage keeps when PP > 1 and the embeddings are "
            "untied (their eh_proj, 2h^2/TP, and three RMSNorms, 3h, are not counted); with --rank megatron in its "
            "most-loaded shard, as Megatron-LM does")

#: The conventions presets (``--conventions``) and kernel sets (``--kernels``): one TOML file each; ``attention``,
#: ``bytes_per_param`` and ``mtp`` are the Training / CLI switches.
PRESET_DIR = Path(__file__).with_name("convention_presets")
_EXTRA = {"attention": ("eager", "flash"), "bytes_per_param": tuple(BYTES_CONVENTIONS), "mtp": (False, True)}


def _checked_switches(where: str, values: Dict) -> Dict[str, object]:
    """``values`` (a preset's or a kernel set's [switches]) checked against the switches' names and values."""
    for k, v in values.items():
        allowed = CONVENTION_SWITCHES[k].values if k in CONVENTION_SWITCHES else _EXTRA.get(k)
        if allowed is None or v not in allowed or isinstance(v, bool) != isinstance(allowed[0], bool):
            raise ValueError(f"{where}: switch {k} = {v!r} is not one of {allowed}")
    return dict(values)


def read_presets(folder: Path = PRESET_DIR) -> Tuple[Dict[str, Dict[str, object]], Dict[str, str],
                                                   Tuple[str, ...], Dict[str, Dict[str, object]]]:
    """(presets, sources, the presets whose name is a term-id suffix, kernel sets) read from ``folder``:
    every ``*.toml`` but ``kernels.toml`` a preset, in the order its ``order`` says.  The files ship with
    the package; a malformed one is a broken install (ValueError naming the file), not a user error."""
    found = []
    for path in sorted(folder.glob("*.toml")):
        if path.name == "kernels.toml":
            continue
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
        if set(data) != {"name", "order", "names_terms", "source", "switches"} or data["name"] != path.stem:
            raise ValueError(f"{path}: a preset has name (its file's stem), order, names_terms, source, [switches]")
        missing = [k for k in (*CONVENTION_SWITCHES, "attention", "bytes_per_param") if k not in data["switches"]]
        if missing:
            raise ValueError(f"{path}: a preset sets every switch; missing {', '.join(missing)}")
        found.append((data["order"], data["name"], data["source"], data["names_terms"],
                      _checked_switches(str(path), data["switches"])))
    found.sort()
    with open(folder / "kernels.toml", "rb") as fh:
        kernels = {k: _checked_switches(f"{folder}/kernels.toml [{k}]", v) for k, v in tomllib.load(fh).items()}
    return ({n: sw for _, n, _, _, sw in found}, {n: src for _, n, src, _, _ in found},
            tuple(n for _, n, _, named, _ in found if named), kernels)


CONVENTION_PRESETS, CONVENTION_SOURCES, NAMING_PRESETS, KERNEL_OVERRIDES = read_presets()


class _ConventionMethods:
    """The methods of :class:`Conventions` (its fields are the switches: see below)."""

    def changed(self) -> List[Tuple[str, object]]:
        """(switch, value) of every switch not at the paper's choice, in CONVENTION_ORDER."""
        out = [(k, getattr(self, k)) for k in CONVENTION_ORDER
               if k in CONVENTION_SWITCHES and getattr(self, k) != CONVENTION_SWITCHES[k].default]
        return out + ([("mtp", True)] if self.mtp else [])

    def side(self, side: str) -> "Conventions":
        """These conventions with the switches that do not act on ``side`` ('activations' or
        'weights') reset to the paper's (what a term of that side depends on)."""
        keep = {k for k, s in CONVENTION_SWITCHES.items() if s.side in (side, "both")}
        reset = {k: s.default for k, s in CONVENTION_SWITCHES.items() if k not in keep}
        if side != "weights":
            reset["mtp"] = False
        return replace(self, **reset)


#: Conventions' first fields, in a fixed order (a report's notebooks print a Conventions(...) call in field
#: order); any other switch follows in CONVENTION_SWITCHES order.
_FIRST_FIELDS = ("routed_tokens", "router_tensors", "shared_expert", "dropout_masks", "checkpoints", "swiglu",
                 "expert_outputs", "latent_norms", "routing_state", "norm_storage", "softmax_dtype", "router_state",
                 "experts", "shared_input", "value_storage", "head_state", "ce_backward", "causal_mask", "rope_tables",
                 "mtp_activations", "expert_tp", "inventory", "rank", "runtime_buffers")
_FIELD_ORDER = sorted(CONVENTION_SWITCHES,
                      key=lambda n: _FIRST_FIELDS.index(n) if n in _FIRST_FIELDS else len(_FIRST_FIELDS))
Conventions = make_dataclass(
    "Conventions", [(name, str, field(default=CONVENTION_SWITCHES[name].default)) for name in _FIELD_ORDER]
    + [("mtp", bool, field(default=False))], bases=(_ConventionMethods,), frozen=True)
Conventions.__module__ = __name__  # pickles and reprs as derivations.config.switches.Conventions
Conventions.__doc__ = ("The modelling assumptions, one field per switch of CONVENTION_SWITCHES (the paper's choice by "
                       "default) and mtp (count the D MTP layers in Megatron's shard).")


def validate_conventions(c: "Conventions") -> None:
    for k, spec in CONVENTION_SWITCHES.items():
        if getattr(c, k) not in spec.values:
            raise ConfigError(k, f"{spec.option} must be one of {', '.join(spec.values)}, got {getattr(c, k)!r}")
    if c.mtp and c.rank == "modelzoo":
        raise ConfigError("mtp", "--mtp counts the D MTP layers' parameters on the last stage (--rank stage) or in "
                                 "Megatron's most-loaded shard (--rank megatron); the ModelZoo rank counts none")


PRESETS = CONVENTION_PRESETS
ORDER = CONVENTION_ORDER


def switch_value(training, name: str):
    """The value of switch ``name`` (CONVENTION_ORDER) in ``training``."""
    if name == "attention":
        return training.attention
    if name == "bytes_per_param":
        return training.bytes_convention
    return getattr(training.conventions, name)


def with_switch(training, name: str, value):
    """``training`` with switch ``name`` set to ``value``."""
    if name == "attention":
        return replace(training, attention=value)
    if name == "bytes_per_param":
        return training.with_bytes_convention(value)
    return replace(training, conventions=replace(training.conventions, **{name: value}))


def with_preset(training, preset: str, mtp: bool = False):
    """``training`` with every switch of ``preset`` (and ``--mtp`` if asked and the preset's
    rank is Megatron's)."""
    if preset not in PRESETS:
        raise ConfigError("conventions", f"conventions must be one of {', '.join(PRESETS)}, got {preset!r}")
    out = training
    for name, value in PRESETS[preset].items():
        out = with_switch(out, name, value)
    if mtp and out.conventions.rank == "megatron":
        out = with_switch(out, "mtp", True)
    return out


def preset_of(training) -> Optional[str]:
    """The preset whose every switch ``training`` has (the MTP switches aside: they say whether MTP
    modules are trained, not whose conventions), else None."""
    for name, p in PRESETS.items():
        if all(switch_value(training, k) == val for k, val in p.items() if k not in ("mtp", "mtp_activations")):
            return name
    return None


def describe(name: str, value) -> str:
    """One line for a switch at a value: its option, value and what the paper does."""
    if name == "attention":
        return f"--attention {value}" + ("" if value == "eager" else " (the paper: eager, 5 b n_h s^2/TP)")
    if name == "bytes_per_param":
        return f"--bytes-per-param {value}" + ("" if value == "paper" else " (the paper: 2/4/4/2/2)")
    if name == "mtp":
        return "--mtp (the paper: no MTP parameters counted)" if value else "no MTP layer counted"
    spec = CONVENTION_SWITCHES[name]
    return f"{spec.option} {value}" + ("" if value == spec.default else f" (the paper: {spec.paper})")


def switches_json(training) -> Dict:
    """Every switch's value (JSON), and the preset they are, if any."""
    out = {name: switch_value(training, name) for name in ORDER}
    out["preset"] = preset_of(training)
    return out


def notes(training) -> List[str]:
    """An assumption line for each switch not at the paper's choice (Conventions ones; the
    attention kernel and bytes are printed by estimate already)."""
    return [f"convention {describe(k, val)}" for k, val in training.conventions.changed()]
