"""The peak over the whole training step, as terms: what one micro-batch's backward adds to the end of its forward.

The paper (Sec. 5-6) judges a device at the end of the forward (``act.stage``, A per micro-batch); the head's backward
(the logits' FP32 gradient, t x V) or a layer's backward under recomputation can hold more.  A *moment* is the bytes
one micro-batch holds then above A; one micro-batch at a time is in its backward, so the step peak is
n_fl A + X, X = max(0, moment_1, moment_2, ...) (the step excess; n_fl = 1 without a schedule).

The moments are in the assembly's symbols (M_A, M_E, M_D, M_H; M_A0, M_E0, M_D0 without recomputation), printed into
derivations/generated/ (``step``), per framework (``--head-state``): ``paper`` (kept tensors only; under recomputation
each layer kind rebuilt is a moment), ``transformers`` (5.24 eager DeepseekV3ForCausalLM) and ``mcore`` (Megatron-Core
0.16.1, local spec), measured in paper/traces/*-step.toml and explained in paper/traces/STEP.md: exact at TP = PP = EP
= CP = 1, the parallel degrees dividing them as the tensors they name are split (no record checks it).  Fused
attention kernels keep no b n_h s^2 tensor."""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Dict, Tuple

import sympy as sp

from derivations import notation as nt
from derivations.assembly.step_names import FRAMEWORKS, NONE_OF, POLICIES, term_id
from derivations.tensors import B_IS_1, HF, IS_FP32, MC, NOT_FP32
from symbolic.term import Part, Term


_S = lambda name: sp.Symbol(name, nonnegative=True)  # noqa: E731
M_A, M_E, M_D, M_H = (_S(n) for n in ("M_A", "M_E", "M_D", "M_H"))
M_A0, M_E0, M_D0 = (_S(NONE_OF[n]) for n in ("M_A", "M_E", "M_D"))
#: 1 under eager attention (the score buffers and wrapped scaling numbers exist), 0 under flash.
u_eager = _S("u_eager")
#: 1 for transformers' grouped_mm experts (``--experts grouped``), 0 for its expert loop.
u_grouped = _S("u_grouped")
#: 1 under Megatron-Core's local layer spec (``--kernels local``: its DotProductAttention), 0 under TE's attention.
u_local = _S("u_local")
#: 1 when Megatron-Core builds the MTP modules on the last stage (``--mtp-activations last-stage``), else 0.
u_mtp = _S("u_mtp")
#: the routing of transformers' expert loop (step_names.ROUTING; 0: the bound for any routing): see :func:`_loop_parts`
n_a, n_b, j_l, j_m = (_S(n) for n in ("n_a", "n_b", "j_l", "j_m"))

b, s, h, V, n_h, d_r, N, k = nt.b, nt.s, nt.h, nt.v, nt.n_h, nt.d_hr, nt.N, nt.N_r
B_a, TP, SP, CP = nt.B_a, nt.TP, nt.SP, nt.CP
L_d, L_m, e_E, e_H = nt.L_d, nt.L_m, nt.e_E, nt.e_H
#: the sequence and tokens of one micro-batch on a device under CP (traced at CP = 1: s / CP of every tensor)
s_loc = s / CP
t = b * s_loc
L = L_d + L_m
#: 1 when the stage has a layer of the kind (Min(1, n) of a count n >= 0)
has_moe, has_dense, has_layers = sp.Min(1, L_m), sp.Min(1, L_d), sp.Min(1, L)
#: the MTP layers on the stage (Megatron-Core: D on the last, each a MoE layer of the decoder's last spec)
D_H = u_mtp * e_H * nt.D

STEP = "paper/traces/STEP.md"
#: the attention scores of one micro-batch on a device, b n_h s^2 (n_h / TP heads, s / CP queries and keys)
P = b * (n_h / TP) * s_loc ** 2
#: the q/k head width (content and RoPE parts); the value of one micro-batch's attention (B_a t n_h d_v)
d_qk, hv = nt.d_h + d_r, B_a * t * (n_h / TP) * nt.d_v
#: the last layer's saves (MoE when the stage has one, else dense): the view's own, A_{L-1} of STEP.md
A_last = M_A + has_moe * M_E + (1 - has_moe) * M_D
#: transformers' shared experts' width h_E N_s (their gate and up outputs, activation output and product: B_a t each)
H_S = B_a * t * nt.h_E * nt.N_s
#: what transformers' shared experts save (B_a t h + 4 B_a t h_E N_s); they run last, their backward first.  In FP32
#: their input is also the router's saved input (``hidden_states.type(torch.float32)`` returns it): not released
SHARED = NOT_FP32 * B_a * t * h + 4 * H_S
#: transformers' last MoE layer rebuilt by full recomputation: its saves without recomputation, less (in FP32, where
#: its input norm saves its input itself) the checkpoint's input, counted in A
REBUILT = M_A0 + M_E0 - IS_FP32 * B_a * t * h
#: c_E of STEP.md: what one of transformers' loop experts saves per token copy
C_E = 3 * B_a * h + 4 * B_a * nt.h_E + 20
#: released once a MoE layer's backward visited two loop experts (n_a, n_b token copies): their saves but the
#: second's int64 indices (torch.where, held by its IndexBackward0)
VISITED = 16 * n_b - C_E * (n_a + n_b)

#: a tied head's weight gradient (V / TP x h), held in the AccumulateGrad node's input buffer from the head's backward
#: until the embedding's adds its own (one leaf used twice)
TIED = ("tied", "the tied head's weight gradient (B_w V h), held until the embedding's backward adds its own",
        nt.SYMBOLS["u_tw"] * e_E * e_H * nt.B_w * V * h / TP,
        "torch autograd (engine): InputBuffer::accumulate, AccumulateGrad; transformers 5.24 modeling_utils.py: "
        "tie_weights; " + MC + "models/common/language_module/language_module.py: shared_embedding_or_output_weight")


#: transformers' RoPE table: cos and sin (s x d_r, B_a each), or DeepSeek-V2's complex64 freqs_cis (s d_r / 2 numbers
#: of 8 bytes whatever B_a: HF models/deepseek_v2 DeepseekV2RotaryEmbedding)
ROPE_HF = (1 - nt.SYMBOLS["u_v2"]) * 2 * B_a * s_loc * d_r + nt.SYMBOLS["u_v2"] * 4 * s_loc * d_r


#: S_hf, S_mc of STEP.md: what transformers' and Megatron-Core's layer saved up to its scores (in FP32 an RMSNorm's
#: FP32 "copy" is its input: the kv norm's, a view of kv_a_proj_with_mqa's output, holds its 4 t d_r RoPE part too;
#: Megatron-Core's input norm's is the layer's input, 4 t h fewer); each RMSNorm's FP32 rsqrt (4 t): the input's,
#: kv's and, with a query LoRA (d_cq > 0; Min(1, d_cq) of a positive symbol would be 1), q's
RSQRT = 4 * t * (2 + sp.Min(1, _S("d_cq")))
LEFT_HF = ((4 + 2 * B_a) * t * (h + nt.d_cq + nt.d_c) + RSQRT + 2 * B_a * t * (n_h / TP) * d_qk + 4 * P
           + IS_FP32 * 4 * t * d_r)
LEFT_MC = ((8 + B_a) * t * (h + nt.d_cq + nt.d_c) + RSQRT + 4 * B_a * s_loc * d_r + 2 * B_a * t * (n_h / TP) * d_qk
           - IS_FP32 * 4 * t * h)
#: Megatron-Core in FP32: the embedding's output, the first layer's norm's saved input, held until the first layer's
#: backward: not released with the head's saves (under full recomputation it is the first checkpoint's input)
EMB_FP32 = IS_FP32 * e_E * B_a * t * h


def _norm(held, kept: str, kept_bytes, src: str, tied: bool, more=()) -> Term:
    """The final RMSNorm's backward at ``PowBackward0`` of its FP32 ``pow(2)`` (torch tools/autograd/derivatives.yaml
    ``pow.Tensor_Scalar``): ``held`` besides the saves, of the head's saves only ``kept``, the seed and five FP32 t x h
    gradients, ``more`` parts; ``tied``: :data:`TIED` held (transformers)."""
    return _term("the final RMSNorm's backward (PowBackward0 of its FP32 pow(2))", src, [
        ("held", "what the end of the forward holds besides the saves", held, STEP),
        ("head", f"released: the head's saves but {kept}", -e_H * (M_H - kept_bytes), src),
        ("seed", "the loss's FP32 seed gradient", 4 * e_H, "torch autograd"),
        ("grads", "five FP32 t x h gradients: MeanBackward1's, MulBackward0's of the FP32 input and pow_backward's "
                  "self.pow(1), 2 self.pow(1) and its product with the gradient", 20 * t * h * e_H,
         "torch 2.13 tools/autograd/derivatives.yaml (pow, mean, mul); torch autograd (engine): InputBuffer"),
        *more], tied=tied)


def _term(meaning: str, prov: str, parts, factor=1, tied=False) -> Term:
    """A moment of ``parts`` (key, label, bytes, source) times ``factor``; ``tied``: :data:`TIED` held as well."""
    return Term("step", meaning, "bytes", prov,
                tuple(Part(key, label, (factor * expr,), provenance=p)
                      for key, label, expr, p in list(parts) + ([TIED] if tied else [])))


def _paper(policy: str) -> Dict[str, Term]:
    if policy == "none":
        return {}
    prov = "extension (issue 26 item 6): the ideal kernels of the paper's view"
    return {f"{kind}_layer": _term(f"the backward of a {kind} layer of the stage: its "
                                   "activations rebuilt (without recomputation, less what the policy kept)", prov,
                                   [("rebuilt", f"the {kind} layer's activations without recomputation (MLA and "
                                     f"{ffn}), less what the policy keeps of them", has * (M_A0 - M_A + m0 - m), "")])
            for kind, ffn, has, m0, m in (("moe", "MoE", has_moe, M_E0, M_E),
                                          ("dense", "dense FFN", has_dense, M_D0, M_D))}


def _transformers(policy: str) -> Dict[str, Term]:
    wrapped = ("wrapped", "float64 0-dim wrapped numbers MulBackward0 keeps: one per eager attention "
               "(attn_weights * self.scaling), one per MoE gate (topk_weights * routed_scaling_factor)",
               8 * (u_eager * L + L_m), HF + ": eager_attention_forward, DeepseekV3MoE.route_tokens_to_experts")
    loss = ("loss", "the FP32 loss", 4 * e_H, "transformers 5.24 loss/loss_utils.py: ForCausalLMLoss")
    held = [wrapped, loss]
    if policy == "full":  # torch.utils.checkpoint (non-reentrant) keeps each checkpointed call's arguments
        held += [("mask", "the eager 4-d causal mask (b x 1 x s x s, B_a), a checkpointed argument",
                  has_layers * u_eager * B_a * b * s_loc ** 2, HF + ": DeepseekV3Model.forward (create_causal_mask)"),
                 ("rope", "the RoPE table (ROPE_HF) and the int64 positions, checkpointed arguments",
                  has_layers * (ROPE_HF + 8 * s_loc), HF + ": DeepseekV3Model.forward (rotary_emb)")]
    eof = sum(p[2] for p in held)
    out = {"end": _term("held at the end of the forward besides the saved tensors",
                        STEP + " (transformers)", held)}
    head = [("held", "what the end of the forward holds besides the saves", eof, STEP),
            ("labels", "released: the int64 shifted labels (a view of the padded labels at b = 1) and the FP32 "
                       "total weight, NllLossBackward0's saves", -(8 * t + 8 * B_IS_1 + 4) * e_H,
             "transformers 5.24 loss/loss_utils.py: fixed_cross_entropy; aten LossNLL.cpp"),
            ("seed", "the loss's FP32 seed gradient", 4 * e_H, "torch autograd"),
            ("grads", "NllLossBackward0's FP32 gradient of the log-probabilities and LogSoftmaxBackward0's FP32 "
                      "output, t x V each", 8 * t * V * e_H, "aten SoftMax.cpp: log_softmax_backward_cpu_out")]
    out["head"] = _term("the head's backward: LogSoftmaxBackward0 (log_softmax_backward)",
                        STEP + " (transformers, no recomputation)", head)
    out["lm_head"] = _term("the head's backward: lm_head's MmBackward0 (its input's gradient)", STEP + " (FP32 "
                           "activations)", head[:3] + [
        ("grads", "the logits' gradient in their dtype (B_a t V: ToCopyBackward0's cast of LogSoftmaxBackward0's "
                  "FP32 output, the output itself in FP32) for the released FP32 log-probabilities (4 t V), and "
                  "MmBackward0's input gradient (B_a t h)", ((B_a - 4) * t * V + B_a * t * h) * e_H,
         "torch autograd; aten mm")],
                           tied=True)
    rope = 0 if policy == "full" else ROPE_HF  # (under full recomputation a checkpointed argument)
    out["norm"] = _norm(eof, "the ids (8 b s), the RoPE table and the FP32 copy of the "
                             "norm's input (4 t h)", 8 * t + rope + 4 * t * h,
                        HF + ": DeepseekV3RMSNorm.forward (hidden_states.to(torch.float32).pow(2).mean(-1))", True)
    # the last layer's attention backward (SoftmaxBackward0): binds from s ~ 1024 on the tiny config (STEP.md)
    release = ("head", "released: the head's saves but the input ids (8 b s)" + (
        "" if policy == "full" else " and the RoPE table (every layer's)"), -e_H * (M_H - 8 * t - rope), STEP)
    attn = [("held", "what the end of the forward holds besides the saves, less the loss", eof - 4 * e_H, STEP),
            release,
            ("left", "what the layer saved up to its scores (three RMSNorms, q and k, the FP32 softmax output)",
             LEFT_HF - (A_last if policy != "full" else 0),
             HF + ": DeepseekV3Attention.forward, eager_attention_forward"),
            ("grads", "ToCopyBackward0's FP32 gradient of the probabilities and SoftmaxBackward0's FP32 output "
                      "(4 b n_h s^2 each), the residual gradient (B_a t h) and the value's B_a gradient",
             8 * P + B_a * t * h + hv, "aten SoftMax.cpp: softmax_backward_cpu_out; torch autograd")]
    out["attention"] = _term("the last layer's attention backward (SoftmaxBackward0)",
                             STEP + " (the attention's moments)", attn, has_layers * u_eager, tied=True)
    # what the last layer's backward starts with
    start = [("held", "what the end of the forward holds besides the saves", eof, STEP), release,
             ("grad", "the last layer's output gradient (B_a, model.norm's ToCopyBackward0) and the seed",
              B_a * t * h + 4 * e_H, STEP)]
    if policy == "partial":  # the layers' moments are measured without recomputation and under full recomputation
        return out
    full = policy == "full"
    rebuilt = REBUILT * int(full)
    # the last MoE layer's shared experts, the last module of its forward: the first of its backward
    out["shared"] = _term("the shared experts' backward of the last MoE layer (MulBackward0 of act(gate) * up)",
                          STEP + " (transformers: the shared experts' backward)", start + [
        ("layer", "the MoE layer rebuilt (its saves without recomputation, every one still held)", rebuilt,
         "torch/utils/checkpoint.py; " + STEP),
        ("grads", "down_proj's MmBackward0 gradient of its input and MulBackward0's two products (B_a t h_E N_s "
                  "each), for down_proj's saved input, released", 2 * H_S,
         HF + ": DeepseekV3MLP.forward (down_proj(act_fn(gate_proj(x)) * up_proj(x))); torch autograd")],
                          has_moe, tied=True)
    # a MoE layer's routed experts' backward (STEP.md; without recomputation every earlier save held; the loop's zero
    # gradient ~15 GB at DeepSeek-V3's dimensions)
    out["expert_loop"] = _term("the expert loop's backward of a MoE layer, at the second expert it visits "
                               "(SelectBackward0 of gate_up_proj)", STEP + " (transformers: the routed experts' "
                               "backward; full recomputation: loop experts at b 1)",
                               start + (_loop_parts() if full else _loop_parts_none()),
                               has_moe * (1 - u_grouped) * sp.Min(1, N / nt.EP - 1), tied=True)
    # grouped_mm experts: the backward of the routing-weight multiply, every token copy at once
    out["experts"] = _term("the grouped_mm experts' backward of the last MoE layer (MulBackward0 of the routing-weight "
                           "multiply; without recomputation at the engine's cast of its gradient)",
                           STEP + " (transformers: the routed experts' backward)", start + [
        ("layer", "what is left of the (rebuilt) MoE layer (non-reentrant checkpoint stops after the shared expert's "
                  "last save): less the shared experts' saves (they ran last, their backward first) and inv_perm "
                  "(int64 t k, its IndexBackward0 has run)", rebuilt - SHARED - 8 * t * k, STEP),
        ("sum", "the engine's sum of the MoE input's gradients from the shared expert's gate and up projections "
                "(B_a t h)", B_a * t * h, "torch autograd (engine)"),
        ("fp32", "three FP32 t k x h buffers: IndexBackward0's gradient and MulBackward0's two products (FP32: the "
                 "routing weights are)", 12 * t * k * h,
         "transformers 5.24 integrations/moe.py: grouped_mm_experts_forward (proj_out * sample_weights_g)"),
        # under full recomputation the node peaks at its second product: its saves, the checkpoint's, are dropped
        ("cast", "the engine's B_a cast of MulBackward0's FP32 gradient of proj_out (t k x h), made while the node "
                 "still keeps its saves; in FP32 none, and the engine's sum of the routing weights' broadcast "
                 "gradient (FP32 t k) binds", int(not full) * (NOT_FP32 * B_a * t * k * h + IS_FP32 * 4 * t * k),
         "torch autograd (engine): validate_outputs, sum_to_size")], has_moe * u_grouped, tied=True)
    if full:
        rebuild = start + [
            ("layer", "the MoE layer rebuilt, as far as non-reentrant checkpoint's early stop runs it: its saves "
                      "without recomputation, the residual after attention and the routed experts' summed output "
                      "(B_a t h each), the FP32 router logits (t x N) and scaled top-k weights (t x k), the layer's "
                      "two wrapped numbers", has_moe * (rebuilt + 2 * B_a * t * h + 4 * t * N + 4 * t * k + 16),
             "torch/utils/checkpoint.py (early stop); " + STEP)]
        out["rebuild"] = _term("the recomputation of the last MoE layer ends",
                               STEP + " (transformers, full recomputation)", rebuild, tied=True)
        # grouped_mm's return in the rebuild, before the shared experts ran: its FP32 index and sum, and their cast
        out["experts_end"] = _term("the recomputation of the last MoE layer at the grouped_mm experts' return "
                                   "(final_hidden_states.to(hidden_states.dtype))",
                                   STEP + " (transformers, full recomputation, grouped_mm)", rebuild + [
            ("shared", "not yet made: the shared experts' saves but their input", -4 * H_S * has_moe, STEP),
            ("sum", "its locals: weighted_out[inv_perm] (FP32 t k x h), its sum over the top k (FP32 t x h), the "
                    "sorted int64 expert ids and their FP32 copy for histc (t k each), the FP32 tokens per expert (N)",
             (4 * t * h * (k + 1) + 12 * t * k + 4 * N) * has_moe,
             "transformers 5.24 integrations/moe.py: grouped_mm_experts_forward")],
                                   u_grouped, tied=True)
    return out


def _loop_parts():
    """P_i of STEP.md less the start of a layer's backward: MoE layer i's expert loop (``DeepseekV3Experts.forward``)
    rebuilt, at the ``SelectBackward0`` of the second expert its backward visits. ``n_a``, ``n_b``: the token copies of
    the last and second-last expert the layer used; ``j_l``, ``j_m``: the layers and MoE layers after it on the stage; 0
    when not given (the bound for any routing)."""
    return [("after", "released: the later layers' checkpointed inputs (B_a t h each) and wrapped numbers",
             -j_l * B_a * t * h - 8 * (u_eager * j_l + j_m),
             "torch/utils/checkpoint.py; " + HF + ": eager_attention_forward, DeepseekV3MoE.route_tokens_to_experts"),
            ("layer", "what is left of the rebuilt layer: its saves without recomputation less the shared experts' "
                      "(their input B_a t h and four B_a t h_E N_s: their backward ran first) and the two visited "
                      "experts' saves (c_E per token copy), but the second's int64 token indices (torch.where: 16 "
                      "per token copy, held by its IndexBackward0)",
             REBUILT - SHARED + VISITED, STEP),
            ("select", "SelectBackward0's zero gradient of the whole gate_up_proj (B_a N 2 h_E h: the device's N / EP "
                       "experts, h_E / ETP wide), made for the second expert the backward visits while the first's is "
                       "the parameter's .grad",
             2 * B_a * (N / nt.EP) * (nt.h_E / nt.ETP) * h,
             "torch autograd: select_backward; " + HF + ": DeepseekV3Experts.forward"),
            ("grads", "MmBackward0's gradients of the expert's weight slice (B_a 2 h_E h) and of its input "
                      "(B_a n_b h), IndexBackward0's zero gradient of the hidden states and the engine's sum of the "
                      "MoE input's gradients (B_a t h each), the engine's FP32 sum of the top-k weights' gradients",
             2 * B_a * (nt.h_E / nt.ETP) * h + B_a * h * n_b + 2 * B_a * t * h + 4 * t * k, "torch autograd (engine)")]


def _loop_parts_none():
    """Q_i of STEP.md: :func:`_loop_parts` without recomputation, every save of the earlier layers held."""
    # the transient and the backward's buffers are those of the rebuilt layer's (the same nodes, the same tensors)
    select, grads = _loop_parts()[2:]
    return [("after", "released: the saves and wrapped numbers of the layers after it (their backward is over)",
             -j_m * (M_A + M_E) - (j_l - j_m) * (M_A + M_D) - 8 * (u_eager * j_l + j_m),
             HF + ": DeepseekV3DecoderLayer.forward, eager_attention_forward, DeepseekV3MoE.route_tokens_to_experts"),
            ("layer", "released of the layer's saves: the shared experts' (their input B_a t h and four B_a t h_E N_s: "
                      "their backward ran first) and the two visited experts' (c_E per token copy), but the second's "
                      "int64 token indices (torch.where: 16 per token copy, held by its IndexBackward0)",
             -SHARED + VISITED, STEP),
            select, grads]


def _mcore(policy: str) -> Dict[str, Term]:
    full = policy == "full"
    tn = 5 * t * N + 8 * N + (8 * t * k if full else 24)
    held = [("scores", "the GlobalMemoryBuffer the local spec's core attention's baddbmm writes the scores into "
                       "(B_a b n_h s^2 / TP), allocated once",
                       has_layers * u_eager * u_local * B_a * b * n_h * s_loc ** 2 / TP,
             MC + "parallel_state.py: GlobalMemoryBuffer; transformer/dot_product_attention.py"),
            ("rope", "each MLA layer's FP32 RotaryEmbedding output (s x d_r), kept by its lru_cache",
             4 * (L + D_H) * s_loc * d_r,
             MC + "models/common/embeddings/rotary_pos_embedding.py: RotaryEmbedding.forward"),
            ("dispatcher", "per MoE layer (and MTP layer) the all-to-all dispatcher's attributes: FP32 probs and bool "
                           "routing map (t x N), int64 tokens per expert (N)"
             + (", int64 permutation indices (t k)" if full else ", three wrapped numbers"),
             (L_m + D_H) * tn, MC + "transformer/moe/token_dispatcher.py: MoEAlltoAllTokenDispatcher."
             "dispatch_preprocess; moe_utils.py: permute"),
            ("mtp", "per MTP layer the float64 wrapped number MulBackward0 keeps (mtp_loss_scale * mtp_loss)", 8 * D_H,
             MC + "models/gpt/gpt_model.py: GPTModel._postprocess")]
    if not full:
        held.append(("tracker", "the load-balancing loss tracker's FP32 value per layer and MTP layer",
                     4 * (L + D_H) * sp.Min(1, L_m + D_H),
                     MC + "transformer/moe/router.py: TopKRouter (num_layers + mtp_num_layers); moe_utils.py: "
                     "save_to_aux_losses_tracker"))
    eof = sum(p[2] for p in held)
    out = {"end": _term("held at the end of the forward besides the saved tensors", STEP + " (Megatron-Core)",
                        held + [("loss", "the FP32 loss", 4 * e_H, MC + "models/gpt/gpt_model.py")])}
    ce = [("held", "what the end of the forward holds besides the saves (no loss yet)", eof, STEP),
          ("logits", "the B_a logits [s, b, V / TP] (GPTModel's local until the loss returns; in FP32 .float() "
                     "returns them and they become the saved softmax in place)", NOT_FP32 * e_H * B_a * t * V / TP,
           MC + "models/gpt/gpt_model.py: GPTModel.forward; tensor_parallel/cross_entropy.py: calculate_logits_max"),
          ("embedding", "the embedding's output (GPTModel.forward's decoder_input, held to its end; under full "
                        "recomputation it is the first layer's checkpointed input, in FP32 the first norm's saved "
                        "input (torch's fused rms_norm), counted in A)",
           0 if full else NOT_FP32 * e_H * e_E * B_a * t * h,
           MC + "models/gpt/gpt_model.py: GPTModel.forward; tensor_parallel/random.py: CheckpointFunction.forward "
           "(ctx.save_for_backward(*args))"),
          ("locals", "the transposed int64 targets (a copy unless b = 1), logits_max (FP32), arange_1d (int64), "
                     "predicted_logits_1d (FP32) and its clone", e_H * (28 - 8 * B_IS_1) * t,
           MC + "tensor_parallel/cross_entropy.py: _VocabParallelCrossEntropy.forward; language_module.py"),
          ("positions", "the int64 position ids", e_H * 8 * s_loc, MC + "models/gpt/gpt_model.py"),
          ("mtp", "with MTP layers, _postprocess's locals of the last: its B_a logits, rolled int64 labels and FP32 "
                  "masked loss, and GPTModel.forward's hidden_states (the decoder's B_a output; the output layer "
                  "reads a chunk of the MTP block's torch.cat; in FP32 the logits are the saved softmax and the "
                  "output the final norm's saved input)",
           sp.Min(1, D_H) * (NOT_FP32 * (B_a * t * V / TP + B_a * t * h) + 12 * t),
           MC + "models/gpt/gpt_model.py: GPTModel.forward, _postprocess; transformer/multi_token_prediction.py: "
           "roll_tensor, MultiTokenPredictionBlock.forward")]
    out["ce"] = _term("the vocabulary-parallel cross-entropy's forward", STEP + " (Megatron-Core)", ce)
    # in BF16 the cross-entropy's forward holds more (the B_a logits): this moment binds in FP32 only
    out["output"] = _term("the output layer's backward, at its input's gradient (FP32 activations)",
                          STEP + " (Megatron-Core: the output layer's backward)", [
        ("held", "what the end of the forward holds besides the saves, the FP32 loss and its seed", eof + 8 * e_H,
         STEP),
        ("ce", "released: the cross-entropy's bool target mask and int64 masked targets (t each); its saved FP32 "
               "softmax is the logits' gradient, made in place", -9 * t * e_H,
         MC + "tensor_parallel/cross_entropy.py: _VocabParallelCrossEntropy.backward"),
        ("grad", "the output layer's input gradient (B_a t h)", B_a * t * h * e_H,
         MC + "tensor_parallel/layers.py: LinearWithGradAccumulationAndAsyncCommunication.backward"),
        ("mtp", "with MTP modules (measured at D = 1), at the output layer's last call: its weight's gradient from the "
                "call before, held in the engine's input buffer (one leaf used D + 1 times), and per MTP head its "
                "input gradient (B_a t h); released per head its FP32 softmax (the gradient, used), its loss state "
                "and targets (21 t + 8, as mtp_release) and the wrapped loss scale (8)",
         sp.Min(1, D_H) * nt.B_w * V * h / TP + D_H * (B_a * t * h - 4 * t * V / TP - 21 * t - 16),
         "torch autograd (engine): InputBuffer::accumulate; " + MC + "models/gpt/gpt_model.py: _postprocess")],
        IS_FP32)
    # with MTP modules the last MTP layer's backward runs first (its final norm, its layer: `last` its saves)
    m = sp.Min(1, D_H)
    heads = ("mtp", "with MTP modules (D = 1 measured), after every head's backward: SplitBackward0's cat of their "
                    "input gradients ((1 + D) B_a t h, whole while the decoder's slice waits); released per head its "
                    "input share, FP32 softmax, targets, loss state, wrapped loss scale (the last MTP final norm's: "
                    "the main's)", m * B_a * t * h - D_H * (4 * t * V / TP + 21 * t + 16),
             MC + "models/gpt/gpt_model.py: GPTModel._postprocess; transformer/multi_token_prediction.py")
    last = (1 - m) * A_last + m * (M_A + M_E)
    out["norm"] = _norm(eof + 4 * e_H, "the ids (8 b s) and the FP32 copy of the norm's input (4 t h)",
                        8 * t + 4 * t * h, "torch 2.13 aten/src/ATen/native/layer_norm.cpp: rms_norm_symint (the "
                        "composite: input.to(opmath), pow(2).mean, rsqrt; a B_a input with an FP32 weight takes it); "
                        + MC + "models/gpt/gpt_model.py (decoder.final_layernorm)", False, [heads])
    # a layer's attention (the local spec's core attention: FusedScaleMaskSoftmax.forward_torch_softmax), STEP.md
    release = ("head", "released: the head's saves but the input ids (8 b s)" + (
        "" if full else " (in FP32 and the embedding's output)"),
        -e_H * (M_H - 8 * t - (0 if full else EMB_FP32)), STEP)
    soft = MC + "fusions/fused_softmax.py: FusedScaleMaskSoftmax.forward_torch_softmax"
    # the forward moments of the stage's last layer (with MTP modules the last MTP layer's: the decoder's saves and
    # output held, not the heads' saves, STEP.md)
    mtp_release = ("mtp", "with MTP modules, released: their heads' saves, not yet made (share of the output layer's "
                          "input B_a t h, FP32 softmax, targets, loss state; the last MTP layer's final norm's for the "
                          "main final norm's, made)", -D_H * (B_a * t * h + 4 * t * V / TP + 21 * t + 8),
                   MC + "models/gpt/gpt_model.py: GPTModel._postprocess; transformer/multi_token_prediction.py")
    mtp_stream = ("mtp_stream", "with MTP modules: the shifted tokens' embedding and the decoder's output "
                                "(GPTModel.forward's hidden_states), B_a t h each, and the rolled int64 input ids",
                  m * (2 * B_a * t * h + 8 * t), MC + "transformer/multi_token_prediction.py: "
                  "MultiTokenPredictionLayer.forward (roll_tensor, embedding)")
    # the stage's input (the embedding's output, GPTModel.forward's decoder_input, or the pipeline's received tensor)
    # and the last layer's input (TransformerBlock.forward's hidden_states; an MTP layer's: eh_proj's output), one
    # tensor when the stage has one layer
    stream = ("stream", "the stage's input (the embedding's output) and the layer's input (B_a t h each, one tensor "
                        "when the stage has one layer) (in FP32 saved by the layers' norms, counted in A), the "
                        "position ids",
              NOT_FP32 * B_a * t * h * (2 - (1 - m) * (2 - sp.Min(2, L))) + 8 * s_loc,
              MC + "models/gpt/gpt_model.py: GPTModel.forward; transformer/transformer_block.py")
    if not full:  # the forward inside the last layer's attention, at probs.bfloat16()
        fwd = [("held", "what the end of the forward holds besides the saves, less the last layer's dispatcher state, "
                        "the MTP layers' wrapped numbers and, before any router ran (the last layer the stage's only "
                        "MoE layer), the loss tracker (not yet made)"
                        + (" and with the checkpoint's int32 mask type" if policy == "partial" else ""),
                eof - 8 * D_H - (m + (1 - m) * has_moe) * tn + (4 if policy == "partial" else 0)
                - 4 * (L + D_H) * (sp.Min(1, L_m + D_H) - sp.Min(1, L_m - (1 - m) * has_moe)), STEP),
               release, mtp_release,
               ("left", "what the last layer saved up to its scores (three RMSNorms, the up-projections' inputs, the "
                        "RoPE saves, q and k) in place of its saves", LEFT_MC - last,
                MC + "transformer/multi_latent_attention.py; transformer/dot_product_attention.py"),
               ("scores",
                "baddbmm's output (B_a b n_h s^2: beta 0 returns a new tensor), input.float()'s FP32 copy and "
                          "the FP32 softmax (4 b n_h s^2 each), the B_a probabilities being made, the bool causal mask",
                8 * P + 2 * B_a * P + s_loc ** 2, soft),
               ("value", "the value (B_a t n_h d_v)", hv, MC + "transformer/multi_latent_attention.py"),
               stream, mtp_stream]
        out["attention_forward"] = _term("the last layer's attention in the forward, "
                                         "at the softmax's cast to B_a", STEP + " (the attention's moments)",
                                         fwd, has_layers * u_eager * u_local)
    if not full:  # the forward inside the last MoE layer's experts, at SequentialMLP's torch.cat
        experts = [("held", "what the end of the forward holds besides the saves, but the loss and the MTP layers' "
                            "wrapped numbers (not yet made)", eof - 8 * D_H, STEP),
                   release, mtp_release,
                   ("layer", "the permuted tokens and FP32 probabilities (B_a t k h + 4 t k), the experts' outputs and "
                             "their torch.cat (2 B_a t k h), the residual after attention (in FP32 the MLP norm's "
                             "saved input) and the shared experts' output (B_a t h each); in FP32 less the layer's "
                             "output, a save (the next norm's input) not yet made",
                    3 * B_a * t * k * h + 4 * t * k + B_a * t * h * (NOT_FP32 - IS_FP32 + sp.Min(1, _S("N_s"))),
                    # (nt.N_s is positive: Min(1, N_s) would be 1)
                    MC + "transformer/moe/moe_layer.py: MoELayer.forward (shared_experts_compute, dispatch, "
                    "routed_experts_compute); transformer/moe/experts.py: SequentialMLP.forward"),
                   stream, mtp_stream]
        out["experts_forward"] = _term("the last MoE layer's routed experts in the forward, at SequentialMLP's "
                                       "torch.cat (the local spec's expert loop: TE's grouped GEMM makes no cat)",
                                       STEP + " (Megatron-Core: the expert loop's forward)",
                                       experts, has_moe * u_local)
    if policy == "partial":  # the backward of the last layer's recomputed core attention
        bwd = [("held", "what the end of the forward holds besides the saves, 12 bytes of 0-dim values fewer (the "
                        "router's wrapped numbers released; the loss and the checkpoint's int32 mask type held)",
                eof - 12, STEP),
               release,
               ("left", "what the last layer saved up to its scores in place of its saves, and the router's int64 "
                        "top-k indices (still held by a node not yet run)", LEFT_MC + 8 * t * k - last, STEP),
               ("recomputed", "the recomputed FP32 softmax (4 b n_h s^2), the bool causal mask, the context "
                              "CheckpointFunction.backward holds as outputs (B_a t n_h d_v), the checkpoint's value",
                4 * P + s_loc ** 2 + 2 * hv, MC + "transformer/attention.py: _checkpointed_attention_forward"),
               ("grads", "the FP32 gradient of the probabilities and SoftmaxBackward0's output (4 b n_h s^2 each), the "
                         "residual gradient, the context's and the value's gradients", 8 * P + B_a * t * h + 2 * hv,
                "aten SoftMax.cpp; torch autograd"), heads]
        out["attention"] = _term("the backward of the last layer's recomputed core attention (with MTP modules the "
                                 "last MTP layer's: its backward runs before the decoder's)",
                                 STEP + " (the attention's moments)", bwd, has_layers * u_eager * u_local)
    if full:  # the first layer's attention backward: every later layer's input gradient is still held
        first = [("held", "what the end of the forward holds besides the saves, the loss tracker (4 L) and 8 bytes of "
                          "0-dim values", eof + 4 * L + 8, STEP),
                 release,
                 ("left", "what the first layer, rebuilt, saved up to its scores", LEFT_MC, STEP),
                 ("recomputed", "the recomputed FP32 softmax and the softmax backward's FP32 gradient and output "
                                "(4 b n_h s^2 each), the bool causal mask, the context's gradient",
                  12 * P + s_loc ** 2 + hv, soft),
                 ("grads", "the input gradients of the later layers (the detached inputs' .grad: "
                           "CheckpointFunction.backward) and this layer's output gradient, B_a t h each",
                  (L + 1) * B_a * t * h, MC + "tensor_parallel/random.py: CheckpointFunction.backward")]
        out["attention"] = _term("the backward of the first layer's rebuilt core attention",
                                 STEP + " (the attention's moments)", first, has_layers * u_eager * u_local)
    if full:  # CheckpointFunction.backward rebuilds the last layer, up to SequentialMLP's torch.cat
        rebuilt = [("held", "what the end of the forward holds besides the saves, less the last layer's dispatcher "
                            "state (its recomputation makes it anew, counted below)",
                    eof - has_moe * tn, STEP),
                   ("loss", "the FP32 loss and its seed gradient", 8 * e_H, MC + "models/gpt/gpt_model.py"),
                   ("head", "released: the head's saves but the input ids (8 b s)", -e_H * (M_H - 8 * t), STEP),
                   ("grad", "the last layer's output gradient (B_a t h)", B_a * t * h,
                    MC + "tensor_parallel/random.py: CheckpointFunction.backward"),
                   ("layer", "the MoE layer rebuilt so far: its saves without recomputation, the residual after "
                             "attention and the shared expert's output (B_a t h each), the dispatcher's state "
                             "(5 t N + 8 N), permute's output and FP32 permuted probabilities (B_a t k h + 4 t k), "
                             "the experts' outputs and their torch.cat (2 B_a t k h), the loss tracker (4 L) and "
                             "the router's three wrapped numbers",
                    has_moe * (M_A0 + M_E0 + 2 * B_a * t * h + 3 * B_a * t * k * h + 5 * t * N + 4 * t * k + 8 * N
                               + 4 * L + 24),
                    MC + "transformer/transformer_layer.py: _forward_mlp; transformer/moe/moe_layer.py: MoELayer."
                    "forward; transformer/moe/moe_utils.py: permute; transformer/moe/experts.py: "
                    "SequentialMLP.forward")]
        out["rebuild"] = _term("the recomputation of the last MoE layer, at the experts' "
                               "torch.cat", STEP + " (Megatron-Core, full recomputation)", rebuilt)
    return out


@lru_cache(maxsize=None)
def moments(framework: str, policy: str) -> Dict[str, Term]:
    """{moment: Term} of ``framework`` under ``policy``: bytes above one micro-batch's end of the forward."""
    if framework not in FRAMEWORKS or policy not in POLICIES:
        raise ValueError((framework, policy))
    made = {"paper": _paper, "transformers": _transformers, "mcore": _mcore}[framework](policy)
    return {name: replace(t, id=term_id(framework, policy, name)) for name, t in made.items()}


def in_terms(expr: sp.Expr, kinds, at, none) -> sp.Expr:
    """``expr`` with the kinds' symbols as the view's terms (``at``), :data:`NONE_OF` ones as ``none``'s."""
    rep = {_S(sym): at[k].expr for k, sym in kinds.items() if k in at}
    rep.update({_S(NONE_OF[sym]): none[k].expr for k, sym in kinds.items() if k in none and sym in NONE_OF})
    return expr.xreplace(rep)


def excess(framework: str, policy: str) -> sp.Expr:
    """X = max(0, moments): the step excess over one micro-batch's end-of-forward activations."""
    ms = [m.expr for m in moments(framework, policy).values()]
    return sp.Max(0, *ms) if ms else sp.Integer(0)


def variants() -> Tuple[Tuple[str, str], ...]:
    return tuple((f, p) for f in FRAMEWORKS for p in POLICIES)


def inputs() -> Tuple[str, ...]:
    """Every symbol's name the moments read."""
    return tuple(sorted({x.name for f, p in variants() for x in excess(f, p).free_symbols}))
