"""Measure what transformers 5.24's DeepseekV4ForCausalLM keeps saved for backward at the end of the forward
(CPU, eager attention, train mode) with memsym's Recorder, and check it against the closed forms of
paper/traces/V4.md.  It writes nothing.

Run:  (from the repository) . .venv/bin/activate && python paper/traces/v4/measure.py [-v] [NAME ...]

The model is built and run as memsym/trace/hf.py ``run`` does.  Variants: build="to" builds in fp32 and casts
to bf16 (V4's fp32-kept modules too); use_cache=False (else the output keeps a DynamicCache); tid2eid="random" fills
the hash routers' frozen table with random experts (its default sends every token to expert 0).
"""
from __future__ import annotations

import collections
import copy
import sys
import tomllib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from memsym.trace.recorder import Recorder  # noqa: E402
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM  # noqa: E402

#: The configurations traced (configs.toml): name -> (DeepseekV4Config fields, b, s, experts, dtype, variant).
with open(Path(__file__).with_name("configs.toml"), "rb") as _f:
    _DATA = tomllib.load(_f)
CONFIGS = {name: (copy.deepcopy({**_DATA["presets"]["base"], **_DATA["presets"][c["preset"]], **c.get("model", {})}),
                  c["b"], c["s"], c["experts"], c["dtype"], c.get("variant", {}))
           for name, c in _DATA["configs"].items()}


def saved_map(roots):
    """storage key -> {(autograd node, saved attribute)} reachable from roots (names the saving nodes)."""
    seen, out = set(), collections.defaultdict(set)
    stack = [r for r in roots if r is not None]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for a in dir(n):
            if a.startswith("_saved_"):
                try:
                    v = getattr(n, a)
                except Exception:
                    continue
                for t in (v if isinstance(v, (tuple, list)) else (v,)):
                    if isinstance(t, torch.Tensor):
                        out[t.untyped_storage()._cdata].add((n.name(), a[7:]))
        if hasattr(n, "saved_tensors"):
            try:
                for t in n.saved_tensors:
                    if isinstance(t, torch.Tensor):
                        out[t.untyped_storage()._cdata].add((n.name(), "saved_tensors"))
            except Exception:
                pass
        stack.extend(nf for nf, _ in n.next_functions if nf is not None)
    return out


def measure(name, verbose=False):
    kw, b, s, experts, dt, var = CONFIGS[name]
    cfg = DeepseekV4Config(**kw)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = experts
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dt]
    torch.manual_seed(0)
    if var.get("build") == "to":
        model = DeepseekV4ForCausalLM._from_config(cfg, dtype=torch.float32).to(torch.bfloat16)
    else:
        model = DeepseekV4ForCausalLM._from_config(cfg, dtype=dtype)
    assert (model.config._attn_implementation, model.config._experts_implementation) == ("eager", experts)
    model.train()
    if var.get("tid2eid") == "random":
        g = torch.Generator().manual_seed(1)
        for layer in model.model.layers:
            if layer.mlp.is_hash:
                layer.mlp.gate.tid2eid.copy_(torch.randint(0, cfg.n_routed_experts, layer.mlp.gate.tid2eid.shape,
                                                           generator=g))
    counts, hooks = {}, []
    for i, layer in enumerate(model.model.layers):
        def hook(mod, args, i=i):
            counts[i] = torch.bincount(args[1].reshape(-1), minlength=cfg.n_routed_experts).tolist()
        hooks.append(layer.mlp.experts.register_forward_pre_hook(hook))
    import transformers.integrations.moe as moe
    can = moe._can_use_grouped_mm
    if var.get("fallback"):  # what torch <= 2.10 on CPU with unaligned weights, or <= 2.8 on CPU, runs
        moe._can_use_grouped_mm = lambda *a: False
    ids = torch.randint(2, cfg.vocab_size, (b, s))
    fwd = {} if "use_cache" not in var else {"use_cache": var["use_cache"]}
    with Recorder(model, stage=(model.model.rotary_emb,)) as rec:
        out = model(input_ids=ids, labels=ids, **fwd)
        if var.get("drop_output"):  # what Trainer.compute_loss keeps: the loss only (the cache is freed)
            out = type("LossOnly", (), {"loss": out.loss, "logits": None, "cache": None})()
    moe._can_use_grouped_mm = can
    for h in hooks:
        h.remove()
    rec.finalize()
    shared = [r for r in rec.held() if r.sublayer == "shared"]
    assert not shared, f"storages held by more than one layer / the stage: {[(r.module, r.shape) for r in shared]}"
    died = collections.Counter()
    for r in rec.discarded():
        died[r.module.split(".", 3)[-1] if r.layer is not None else r.module] += r.nbytes
    per, outside = rec.by_layer(cfg.num_hidden_layers)
    detail = None
    if verbose:
        roots = [out.loss.grad_fn] + ([out.logits.grad_fn] if out.logits is not None else [])
        if out.cache is not None:
            for L in out.cache.layers:
                for attr in ("compressed_kv", "buffer_kv", "buffer_gate", "overlap_kv", "overlap_gate"):
                    for t in (getattr(L, attr, None) or {}).values():
                        if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                            roots.append(t.grad_fn)
        m = saved_map(roots)
        detail = [(r.layer, r.module, r.dtype, r.shape, r.nbytes, sorted(m.get(r.key, {("?", "?")})))
                  for r in rec.held()]
    out.loss.backward()  # it trains
    if verbose:
        print("   saved by nodes that died in the forward (bytes per module, all layers):", dict(died))
    return cfg, b, s, experts, dt, var, per, outside, counts, detail


# closed forms (DERIVATION.md section 2)

def closed_form(cfg, b, s, experts, dt, var, counts=None):
    """Bytes held per layer and outside.  Returns (per-layer list, outside, per-layer term dicts)."""
    Ba = 2 if dt == "bf16" else 4
    f32 = dt == "fp32"                   # everything in fp32: some casts become no-ops and storages merge
    to = var.get("build") == "to"        # model.to(bf16): V4's fp32-kept params are bf16 too
    # hf.run: config.use_cache (True) -> DynamicCache kept in the output (delta = 1)
    cache = var.get("use_cache", True) and not var.get("drop_output")
    h, n_h, d = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
    d_r, d_cq = cfg.qk_rope_head_dim, cfg.q_lora_rank
    g, d_g = cfg.o_groups, cfg.o_lora_rank
    n, tS = cfg.hc_mult, cfg.hc_sinkhorn_iters
    d_I = cfg.index_head_dim  # n_I appears in no kept tensor (the indexer's scores feed only a top-k)
    N, Nr, hE, v = cfg.n_routed_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size, cfg.vocab_size
    bs = b * s

    def rms(rows, D):  # DeepseekV4RMSNorm (fp32 weight): x.float(), rsqrt, x*rsqrt, all fp32
        return rows * (8 * D + 4)

    def hc():  # one DeepseekV4HyperConnection (attn_hc or ffn_hc), its input streams included
        t = bs * (4 * n * h          # input_norm: x = streams.float() (Pow, Mul self)   [merged with streams in fp32]
                  + 4                # input_norm: rsqrt (Rsqrt result, Mul other)
                  + 4 * n * h        # F.linear input: the normed streams (Mm self)
                  + 4 * (2 + n) * n  # the linear output (pre_w/post_w/comb_w * scale: Mul self)
                  + 2 * 4 * n        # sigmoid results (pre, post)
                  + 4 * n * n        # softmax result (comb)
                  + (2 * tS - 1) * 4 * (n * n + n)  # Sinkhorn: every division keeps numerator and denominator
                  + 4 * n)           # pre (+eps) for the collapse (Mul self)
        t += bs * n * h * Ba         # the input streams (collapse Mul other, residual Bmm mat2)
        if f32:
            t -= bs * 4 * n * h      # streams.float() is the streams themselves
        if to:
            t += 4 * (2 + n) * n * n * h  # fn.float(): a fp32 copy of the bf16 weight (Mm mat2)
        return t

    def mix():  # post * block_output + comb^T @ streams (in the decoder layer, after each block)
        return bs * (h * Ba + n * Ba + n * n * Ba)  # block output, post.to(dtype), comb.to(dtype)

    def attention(kind):
        T = s // cfg.compress_rates[kind] if kind != "sliding_attention" else 0
        m = cfg.compress_rates.get(kind, 0)
        S = s + T
        t = {}
        t["input_layernorm"] = rms(bs, h)
        t["norm_out(q_a/kv/compressor proj input)"] = bs * h * Ba
        t["q_a_norm"] = rms(bs, d_cq)
        t["q_residual(q_b_proj input)"] = bs * d_cq * Ba
        t["q_b_norm"] = bs * n_h * (4 * d + 4) + (0 if f32 else bs * n_h * (Ba + d * Ba))
        t["kv_norm"] = rms(bs, d)
        t["rope cos/sin x3 (q, kv, out)"] = 6 * s * d_r * Ba
        if b == 1 or n_h == 1:
            t["K=V (Bmm mat2 x2)"] = b * S * d * Ba
        else:
            t["K, V copies (Bmm mat2)"] = 2 * b * n_h * S * d * Ba
        t["q (Bmm self)"] = bs * n_h * d * Ba
        t["max indices"] = bs * n_h * 8
        if to:  # sinks are bf16 too: the logits and their softmax stay bf16; probs[..., :-1].to(bf16) is a view
            t["softmax (with sink), bf16"] = bs * n_h * (S + 1) * Ba
        else:   # the fp32 sinks promote the cat to fp32
            t["softmax (with sink)"] = bs * n_h * (S + 1) * 4
        if not f32 and not to:
            t["probs.to(bf16) (Bmm self)"] = bs * n_h * S * Ba
        t["o_a_proj input"] = bs * n_h * d * Ba
        t["o_b_proj input"] = bs * g * d_g * Ba
        if kind == "compressed_sparse_attention" and T > 0:
            t["csa: gate softmax fp32"] = b * T * 2 * m * d * 4
            t["csa: new_kv"] = b * T * 2 * m * d * Ba
            if not f32:
                t["csa: softmax.to(bf16)"] = b * T * 2 * m * d * Ba
            t["csa: kv_norm"] = rms(b * T, d)
            t["csa: rope cos/sin"] = 2 * b * T * d_r * Ba
            if cache:  # the DynamicCache keeps the indexer's compressed keys (and their graph) alive
                t["indexer(cache): gate softmax fp32"] = b * T * 2 * m * d_I * 4
                t["indexer(cache): new_kv"] = b * T * 2 * m * d_I * Ba
                if not f32:
                    t["indexer(cache): softmax.to(bf16)"] = b * T * 2 * m * d_I * Ba
                t["indexer(cache): kv_norm"] = rms(b * T, d_I)
                t["indexer(cache): rope cos/sin"] = 2 * b * T * d_r * Ba
        if kind == "heavily_compressed_attention" and T > 0:
            t["hca: kv_proj output (chunk_kv, Mul self)"] = bs * d * Ba
            t["hca: gate softmax fp32"] = b * T * m * d * 4
            if not f32:
                t["hca: softmax.to(bf16)"] = b * T * m * d * Ba
            t["hca: kv_norm"] = rms(b * T, d)
            t["hca: rope cos/sin"] = 2 * b * T * d_r * Ba
        return t

    def ffn(i):
        t = {}
        t["post_attention_layernorm"] = rms(bs, h)
        t["norm_out(router/shared input)"] = bs * h * Ba
        if cfg.scoring_func == "sqrtsoftplus":  # sqrt(softplus(logits)): Softplus keeps its input
            t["router logits (Softplus self)"] = bs * N * Ba
        t["router scores (Sqrt result, Gather self)"] = bs * N * Ba
        t["router indices int64 (Gather index)"] = bs * Nr * 8
        t["router weights (Div self)"] = bs * Nr * Ba
        t["router denominator (Div other)"] = bs * Ba
        if experts == "grouped_mm":
            S_ = bs * Nr
            t["grouped: perm//k, perm, inv_perm int64"] = 3 * S_ * 8
            if not var.get("fallback"):  # the fallback op keeps offs as a ctx attribute, not a saved tensor
                t["grouped: offsets int32"] = N * 4
            t["grouped: activations"] = S_ * Ba * (2 * h + 6 * hE + 1)
        else:
            per_e = lambda c: c * (16 + Ba * (3 * h + 6 * hE + 1))  # noqa: E731
            if counts is not None and i in counts:
                t["loop experts: sum_{c_e>0} c_e(16+B_a(3h+6h_E+1))"] = sum(per_e(c) for c in counts[i] if c > 0)
            else:
                t["loop experts"] = per_e(bs * Nr)
        t["shared expert"] = 6 * bs * hE * Ba
        return t

    per, terms = [], []
    for i, kind in enumerate(cfg.layer_types):
        t = {"attn_hc": hc(), "attn mix": mix(), "ffn_hc": hc(), "ffn mix": mix()}
        t.update(attention(kind))
        t.update(ffn(i))
        per.append(sum(t.values()))
        terms.append(t)
    o = {}
    o["embedding indices int64"] = bs * 8
    o["hc_head"] = bs * (4 * n * h + 4 + 4 * n * h + 4 * n + 4 * n + 4 * n) + bs * n * h * Ba
    if f32:
        o["hc_head"] -= bs * 4 * n * h
    if to:
        o["hc_head"] += 4 * n * n * h + 4  # hc_fn.float() and hc_scale.float() copies
    o["norm"] = rms(bs, h)
    o["lm_head input"] = bs * h * Ba
    o["log_softmax (fp32)"] = bs * v * 4
    o["shifted labels int64"] = 8 * (s + 1) if b == 1 else 8 * bs
    o["nll total_weight"] = 4
    return per, sum(o.values()), terms, o


def doc_form(cfg, b, s, experts, dt, var):
    """The simplified closed forms exactly as written in DERIVATION.md section 2 (checked equal to closed_form)."""
    Ba = 2 if dt == "bf16" else 4
    f32, to = dt == "fp32", var.get("build") == "to"
    delta = 1 if var.get("use_cache", True) and not var.get("drop_output") else 0
    h, n_h, d, d_r, d_cq = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim, cfg.qk_rope_head_dim, cfg.q_lora_rank
    g, d_g, n, tS = cfg.o_groups, cfg.o_lora_rank, cfg.hc_mult, cfg.hc_sinkhorn_iters
    d_I, N, Nr = cfg.index_head_dim, cfg.n_routed_experts, cfg.num_experts_per_tok
    hE, v = cfg.moe_intermediate_size, cfg.vocab_size
    m, mp = cfg.compress_rates["compressed_sparse_attention"], cfg.compress_rates["heavily_compressed_attention"]
    HC = n * h * (8 + Ba) + 4 + 20 * n + 8 * n * n + 4 * (2 * tS - 1) * (n * n + n)
    MIX = Ba * (h + n + n * n)
    layer_hc = (2 * b * s * (HC + MIX) - (2 * 4 * b * s * n * h if f32 else 0)
                + (2 * 4 * (2 + n) * n * n * h if to else 0))

    def att(S):
        soft = n_h * (S + 1) * Ba if to else n_h * (4 * (S + 1) + S * Ba)
        tok = h * (8 + Ba) + d_cq * (8 + Ba) + 8 * d + 12 + n_h * (4 * d + 3 * d * Ba + 12 + Ba) + soft + g * d_g * Ba
        if f32:
            tok -= n_h * (4 * d + 4) + 4 * n_h * S
        kv = b * S * d * Ba if (b == 1 or n_h == 1) else 2 * b * n_h * S * d * Ba
        return b * s * tok + 6 * s * d_r * Ba + kv

    router_scores = 2 * N * Ba if cfg.scoring_func == "sqrtsoftplus" else N * Ba
    moe = b * s * (h * (8 + Ba) + 4 + router_scores + Nr * (8 + Ba) + Ba + 6 * hE * Ba)
    if experts == "grouped_mm":
        moe += b * s * Nr * (24 + Ba * (2 * h + 6 * hE + 1)) + (0 if var.get("fallback") else 4 * N)
    else:
        moe += b * s * Nr * (16 + Ba * (3 * h + 6 * hE + 1))
    per = []
    for kind in cfg.layer_types:
        if kind == "sliding_attention":
            a = att(s)
        elif kind == "compressed_sparse_attention":
            T = s // m
            a = att(s + T)
            if T:
                a += b * T * (2 * m * d * (4 + 2 * Ba) + 8 * d + 4 + 2 * d_r * Ba)
                a += delta * b * T * (2 * m * d_I * (4 + 2 * Ba) + 8 * d_I + 4 + 2 * d_r * Ba)
                if f32:
                    a -= 4 * b * T * 2 * m * (d + delta * d_I)
        else:
            T = s // mp
            a = att(s + T)
            if T:
                a += b * s * d * Ba + b * T * (mp * d * (4 + Ba) + 8 * d + 4 + 2 * d_r * Ba)
                if f32:
                    a -= 4 * b * T * mp * d
        per.append(layer_hc + a + moe)
    lab = 8 * (s + 1) if b == 1 else 8 * b * s
    out = b * s * (n * h * (8 + Ba) + h * (8 + Ba) + 12 * n + 16 + 4 * v) + lab + 4
    if f32:
        out -= 4 * b * s * n * h
    if to:
        out += 4 * n * n * h + 4
    return per, out


def main(argv):
    verbose = "-v" in argv
    names = [a for a in argv if a != "-v"] or list(CONFIGS)
    ok = True
    for name in names:
        cfg, b, s, experts, dt, var, per, outside, counts, detail = measure(name, verbose)
        cper, cout, terms, oterms = closed_form(cfg, b, s, experts, dt, var, counts)
        # the loop experts also checked without the routing (sum c_e = b s N_r)
        cper2, _, _, _ = closed_form(cfg, b, s, experts, dt, var, None)
        dper, dout = doc_form(cfg, b, s, experts, dt, var)
        match = per == cper and outside == cout and cper2 == cper and (dper, dout) == (cper, cout)
        ok &= match
        print(f"{name}: b={b} s={s} experts={experts} {dt} {var} layers={cfg.layer_types} "
              f"mlp={cfg.mlp_layer_types}")
        print(f"   measured per layer {per} outside {outside}")
        print(f"   closed   per layer {cper} outside {cout}   {'MATCH' if match else 'MISMATCH'}")
        print(f"   doc form per layer {dper} outside {dout}")
        if experts == "eager":
            print(f"   expert token counts {dict(counts)}")
        if verbose:
            for r in sorted(detail, key=lambda r: (-1 if r[0] is None else r[0])):
                print("     ", r)
    print("ALL MATCH" if ok else "SOME MISMATCH")


if __name__ == "__main__":
    main(sys.argv[1:])
