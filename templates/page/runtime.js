"use strict";
/* Exact rationals and the configuration's rules as derivations states them (each names its Python); every formula
   is printed: FNS (memsym/page/data.py) or ASSEMBLY (derivations/generated); none is written here. */

// ----------------------------------------------------------------------------- exact rationals
function gcd(a, b) { a = a < 0n ? -a : a; b = b < 0n ? -b : b; while (b) { [a, b] = [b, a % b]; } return a; }
const Q = {
  make(n, d) {
    if (d === 0n) throw new Error("division by zero");
    if (d < 0n) { n = -n; d = -d; }
    const g = gcd(n, d) || 1n;
    return { n: n / g, d: d / g };
  },
  n(a, b) { return Q.make(BigInt(a), BigInt(b === undefined ? 1 : b)); },
  of(x) { return (typeof x === "object" && x !== null) ? x : Q.make(BigInt(x), 1n); },
  parse(text) {  // "123", "3/2"
    const [a, b] = String(text).split("/");
    return Q.n(a, b === undefined ? "1" : b);
  },
  // null is +infinity (m not given: sympy's oo): it absorbs + and x by positive factors, and loses min
  add(...xs) { if (xs.includes(null)) return null; return xs.reduce((a, b) => { a = Q.of(a); b = Q.of(b); return Q.make(a.n * b.d + b.n * a.d, a.d * b.d); }, Q.n(0)); },
  mul(...xs) { if (xs.includes(null)) return null; return xs.reduce((a, b) => { a = Q.of(a); b = Q.of(b); return Q.make(a.n * b.n, a.d * b.d); }, Q.n(1)); },
  div(a, b) { a = Q.of(a); b = Q.of(b); return Q.make(a.n * b.d, a.d * b.n); },
  pow(a, k) {
    a = Q.of(a);
    if (k < 0) return Q.div(Q.n(1), Q.pow(a, -k));
    return Q.make(a.n ** BigInt(k), a.d ** BigInt(k));
  },
  cmp(a, b) { a = Q.of(a); b = Q.of(b); const x = a.n * b.d - b.n * a.d; return x < 0n ? -1 : (x > 0n ? 1 : 0); },
  min(...xs) { return xs.reduce((a, b) => (a === null ? b : (b === null ? a : (Q.cmp(a, b) <= 0 ? a : b)))); },
  max(...xs) { return xs.reduce((a, b) => (a === null || b === null ? null : (Q.cmp(a, b) >= 0 ? a : b))); },
  // floor of a rational (BigInt division truncates toward zero; the terms' floors are of positive values)
  floor(a) { a = Q.of(a); const q = a.n / a.d; return Q.make(a.n < 0n && q * a.d !== a.n ? q - 1n : q, 1n); },
  // a Piecewise's conditions (Eq; DeepSeek-V4's HCA indicator s >= m_H)
  eq(a, b) { return Q.cmp(a, b) === 0; },
  le(a, b) { return Q.cmp(a, b) <= 0; },
  lt(a, b) { return Q.cmp(a, b) < 0; },
  str(a) { return a.d === 1n ? a.n.toString() : `${a.n}/${a.d}`; },
  float(a) { return Number(a.n) / Number(a.d); },
};
const INF = null;  // m not given: at least enough micro-batches to fill the pipeline

const fmtNum = (x, d) => x.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
const fmtInt = (q) => (q.d === 1n ? q.n.toLocaleString("en-US") : fmtNum(Q.float(q), 3));  // symbolic.render.fmt_int
const fmtGiB = (q, decimals = 2) => fmtNum(Q.float(q) / DATA.options.gib, decimals);  // symbolic.render.fmt_gib
function pct(a, b) { return `${Math.round(Q.float(a) / Q.float(b) * 100)}%`; }

/** A refusal: the command line's message (after "memsym: error: ") and the page's fields it concerns
    (control ids without "opt-", the first where the message is shown). */
class ConfigError extends Error {
  constructor(message, fields) { super(message); this.fields = fields || []; }
}

// ----------------------------------------------------------------------------- hfconfig.from_dict
/** The model of a parsed config.json (a Map, inputs.js readConfigJSON), every field checked as hfconfig.from_dict
    checks it; the dimensions become Numbers (at most 2^24 by FIELDS), n_group and topk_group stay BigInt. */
function fromDict(data, path, name, fields, inner) {
  const err = (message) => new ConfigError(`${path}: ${message}`, fields);
  const get = (k, dflt) => (data.has(k) ? data.get(k) : dflt);
  const int = (field, meaning, minimum = 1, dflt, required = true) => {
    if (!data.has(field)) {
      if (required) throw err(`required field ${reprStr(field)} (${meaning}) is missing`);
      return dflt;
    }
    const x = data.get(field);
    if (typeof x !== "bigint") throw err(`field ${reprStr(field)} (${meaning}) must be an integer, got ${typeName(x)} ${shownValue(x)}`);
    if (x < BigInt(minimum)) {
      const kind = minimum === 1 ? "a positive integer" : `an integer >= ${minimum}`;
      throw err(`field ${reprStr(field)} (${meaning}) must be ${kind}, got ${shownValue(x)}`);
    }
    const lim = FIELD_LIMITS[field];
    if (lim !== undefined && x > BigInt(lim.high))
      throw err(`field ${reprStr(field)} (${meaning}) must be at most ${lim.domain.split("..")[1]} (${lim.why}), got ${shownValue(x)}`);
    return x;
  };
  const O = DATA.options;
  const mt = get("model_type", null);
  if (mt === null && !inner) throw err(`required field 'model_type' is missing (memsym covers ${O.all_model_types.join(", ")})`);
  // hfconfig.from_dict: a config holding the language model in a field (Kimi K2.5's text_config)
  const wrap = O.wrappers.find((w) => w[0] === mt);
  if (wrap !== undefined && inner)
    throw err(`model_type ${shownValue(mt)} inside ${inner}: a wrapper in a wrapper is not read`);
  if (wrap !== undefined) {
    const [, field, innerType] = wrap;
    const text = get(field, null);
    if (!(text instanceof Map))
      throw err(`model_type ${shownValue(mt)}: field ${reprStr(field)} (its language model) must be an object, got ${typeName(text)}`);
    return fromDict(new Map([["model_type", innerType], ...text]), `${path} ${field}`, name, fields, field);
  }
  if (typeof mt === "string" && mt in O.other_families)  // another family's config: its reader is the command line's
    throw err(`model_type ${shownValue(mt)} (${O.other_families[mt]}): the page reads pasted DeepSeek-family configs; write a page for this one with memsym page --model config.json`);
  if (!(typeof mt === "string" && O.model_types.includes(mt)))
    throw err(`model_type ${shownValue(mt)} is not an architecture memsym covers (${O.covered})`);
  const m = {};
  for (const [field, attr, meaning] of O.dimensions) m[attr] = int(field, meaning);
  if (!data.has("q_lora_rank"))
    throw err("required field 'q_lora_rank' (query compression rank d_c') is missing; write null for a model without query compression");
  m.d_cq = data.get("q_lora_rank") === null ? null : int("q_lora_rank", "query compression rank d_c'");
  m.N_s = get("n_shared_experts", null) === null ? 0n : int("n_shared_experts", "shared experts N_s", 0);
  m.first_k_dense = int("first_k_dense_replace", "leading dense layers", 0);
  m.moe_layer_freq = int("moe_layer_freq", "MoE layer frequency", 1, 1n, false);
  m.mtp_layers = int("num_nextn_predict_layers", "MTP modules D", 0, 0n, false);
  const choice = (field, dflt, values) => {  // one of ``values`` (strings), or true or false when ``values`` is null
    const x = get(field, dflt);
    if (values === null ? typeof x !== "boolean" : typeof x !== "string" || !values.includes(x))
      throw err(`field ${reprStr(field)} must be ${values === null ? "true or false" : `one of ${values.join(", ")}`}, got ${typeName(x)} ${shownValue(x)}`);
    return x;
  };
  const defaultTopk = ["deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa"].includes(mt) ? "noaux_tc" : "greedy";
  const topk = choice("topk_method", defaultTopk, O.topk_methods);
  m.n_group = int("n_group", "expert groups n_g", 1, null, false);
  m.topk_group = int("topk_group", "expert groups kept k_g", 1, null, false);
  // the routing the config leaves out: its model type's (config.py SCORING_DEFAULTS, NORM_DEFAULTS, GROUP_DEFAULTS)
  const v2 = mt === "deepseek_v2";
  const scoring = choice("scoring_func", v2 ? "softmax" : "sigmoid", O.scoring_funcs);
  const norm = choice("norm_topk_prob", !v2, null);
  const tied = choice("tie_word_embeddings", false, null);
  for (const flag of ["attention_bias", "mlp_bias"]) {
    const val = get(flag, false);
    if (val !== false && val !== null)
      throw err(`field ${reprStr(flag)} = ${shownValue(val)}: projection biases are not covered (DeepSeek checkpoints have none)`);
  }
  // config.py _indexer: DeepSeek Sparse Attention's lightning indexer (defaults: config.py DSA), GLM-5's indexer_types
  const { dsa, index_fields: index, sharing_fields: sharing } = O;
  m.indexer = false;
  m.indexer_types = [];
  if (!Object.prototype.hasOwnProperty.call(dsa, mt)) {
    const given = index.map(([k]) => k).concat(sharing).find((k) => data.has(k));
    if (given !== undefined)
      throw err(`field ${reprStr(given)}: a DSA indexer is read for model_type ${Object.keys(dsa).join(" or ")} only (this config's transformers code, ${mt}, builds none)`);
  } else {
    const [defaults, attention] = dsa[mt];
    if (m.d_cq === null)
      throw err(`q_lora_rank must be set for ${mt} (its indexer reads the compressed query; transformers' ${attention} has no uncompressed form)`);
    index.forEach(([field, attr, meaning], i) => { m[attr] = int(field, meaning, 1, BigInt(defaults[i]), false); });
    if (m.d_I < m.d_hr)
      throw err(`index_head_dim=${m.d_I} is below qk_rope_head_dim: the indexer rotates its first qk_rope_head_dim dimensions`);
    if (m.moe_layer_freq !== 1n)
      throw err(`moe_layer_freq=${m.moe_layer_freq}: transformers' ${mt} code makes every layer after first_k_dense_replace a MoE layer (write 1 or leave it out)`);
    const kinds = get("mlp_layer_types", null);
    const nd = m.first_k_dense < m.l ? m.first_k_dense : m.l;
    if (kinds !== null && !(Array.isArray(kinds) && BigInt(kinds.length) === m.l
        && kinds.every((x, i) => x === (BigInt(i) < nd ? "dense" : "sparse"))))
      throw err("field 'mlp_layer_types' must be first_k_dense_replace 'dense' entries then 'sparse' ones (other patterns are not covered)");
    const types = get("layer_types", null);
    if (types !== null && !(Array.isArray(types) && BigInt(types.length) === m.l && types.every((x) => x === "indexed_attention")))
      throw err("field 'layer_types' must list 'indexed_attention' once per layer (other attention types are not covered)");
    if (mt === "deepseek_v32") {
      const given = sharing.find((k) => data.has(k));
      if (given !== undefined)
        throw err(`field ${reprStr(given)}: shared indexer layers are read for model_type glm_moe_dsa only (transformers' deepseek_v32 code runs an indexer in every layer)`);
    } else {
      // GlmMoeDsaConfig.__post_init__: indexer_types, else index_topk_pattern, else index_topk_freq / index_skip_topk_offset
      let field, layerTypes;
      if (get("indexer_types", null) !== null) {
        field = "indexer_types"; layerTypes = data.get(field);
      } else if (get("index_topk_pattern", null) !== null) {
        field = "index_topk_pattern";
        const pattern = data.get(field);
        if (typeof pattern === "string") {
          if ([...pattern].some((c) => c !== "F" && c !== "S"))
            throw err(`field 'index_topk_pattern' must be a string of F (full) and S (shared), got ${shownValue(pattern)}`);
          layerTypes = [...pattern].map((c) => (c === "F" ? "full" : "shared"));
        } else layerTypes = pattern;
      } else {
        field = "index_skip_topk_offset";
        const freq = int("index_topk_freq", "layers per full indexer layer", 1, 1n, false);
        const offset = int("index_skip_topk_offset", "leading full indexer layers", 0, 2n, false);
        layerTypes = [];
        for (let i = 0n; i < m.l; i++) {
          const j = i - offset + 1n;
          layerTypes.push((j > 0n ? j : 0n) % freq === 0n ? "full" : "shared");
        }
      }
      if (!(Array.isArray(layerTypes) && BigInt(layerTypes.length) === m.l && layerTypes.every((x) => x === "full" || x === "shared")))
        throw err(`field ${reprStr(field)} must give 'full' or 'shared' once per layer (${m.l}), got ${typeName(layerTypes)} ${shownValue(layerTypes)}`);
      if (layerTypes[0] !== "full")
        throw err(`field ${reprStr(field)}: layer 0 must be 'full' (a 'shared' layer reuses the top-k of the full layer before it)`);
      m.indexer_types = layerTypes;
    }
    m.indexer = true;
  }
  if (m.N_r > m.N) throw err(`num_experts_per_tok=${m.N_r} exceeds n_routed_experts=${m.N}`);
  if (m.first_k_dense > m.l) throw err(`first_k_dense_replace=${m.first_k_dense} exceeds num_hidden_layers=${m.l}`);
  fp8Block(data, err);
  // bounded by FIELDS (at most 2^24): exact as Numbers from here
  for (const k of ["h", "h_F", "h_E", "l", "n_h", "d_c", "d_h", "d_hr", "d_v", "N", "N_r", "v", "N_s", "first_k_dense",
    "moe_layer_freq", "mtp_layers"]) m[k] = Number(m[k]);
  if (m.d_cq !== null) m.d_cq = Number(m.d_cq);
  if (m.indexer) for (const k of ["n_I", "d_I", "k_I"]) m[k] = Number(m[k]);
  m.name = name; m.topk_method = topk; m.tie_word_embeddings = tied;
  m.q_lora = m.d_cq !== null; m.routing_bias = topk === "noaux_tc";
  m.kinds = [];
  for (let i = 0; i < m.l; i++) m.kinds.push(i >= m.first_k_dense && i % m.moe_layer_freq === 0 ? "moe" : "dense");
  // ModelSpec.layer_features and mtp_layer_features: the layers (and MTP modules) holding a DSA indexer of their own
  m.features = m.kinds.map((_, i) => (m.indexer && (m.indexer_types.length === 0 || m.indexer_types[i] === "full") ? ["indexer"] : []));
  m.mtp_features = m.indexer ? ["indexer"] : [];
  // as the command line's spec: its family, its structure (ModelSpec.structure) and its symbols (ModelSpec.named)
  m.family = "deepseek"; m.structure = [m.q_lora, m.routing_bias, tied, m.indexer];
  // ModelSpec.routing: the routing indicators (0 or 1) the routers' tensor lists read (config.py GROUP_DEFAULTS)
  const topkGroup = m.topk_group !== null ? m.topk_group : (v2 ? null : (mt === "glm_moe_dsa" ? 1n : 4n));
  m.named = { h: m.h, h_F: m.h_F, h_E: m.h_E, l: m.l, n_h: m.n_h, d_c: m.d_c, d_h: m.d_h, d_hr: m.d_hr, d_v: m.d_v, N: m.N,
    N_s: m.N_s, N_r: m.N_r, v: m.v, D: m.mtp_layers, n_g: m.n_group !== null ? m.n_group : 1n,
    k_g: m.topk_group !== null ? m.topk_group : 1n, u_v2: v2 ? 1 : 0, u_nt: norm ? 1 : 0,
    u_lg: topk === "group_limited_greedy" ? 1 : 0, u_sg: scoring === "sigmoid" ? 1 : 0, u_eb: m.routing_bias ? 1 : 0,
    u_gk: topkGroup !== null ? 1 : 0 };
  if (m.d_cq !== null) m.named.d_cq = m.d_cq;
  if (m.indexer) Object.assign(m.named, { n_I: m.n_I, d_I: m.d_I, k_I: m.k_I });
  return m;
}
/** The family data of a model (memsym/page/data.py family_data). */
const familyOf = (m) => DATA.families[m.family];
/** Families.structure_key: each flag's letter and value (``q1b1t0``; a late flag only when set: ``q1b1t0i1``). */
const structureKey = (m) => {
  const f = familyOf(m);
  return f.letters.split("").map((c, i) => (m.structure[i] || !f.late_flags.includes(f.flags[i]) ? c + (m.structure[i] ? 1 : 0) : ""))
    .join("");
};
/** Families.activation_key: the letters and values of the flags the tensor lists depend on (``q1``), or ``all``. */
function activationKey(m) {
  const f = familyOf(m);
  return f.activation_flags.map((flag) => { const i = f.flags.indexOf(flag); return f.letters[i] + (m.structure[i] ? 1 : 0); }).join("") || "all";
}
/** hfconfig._fp8_block: only checked (FP8 scales are storage, not estimated memory). */
function fp8Block(data, err) {
  const q = data.has("quantization_config") ? data.get("quantization_config") : null;
  if (q === null) return;
  if (!(q instanceof Map)) throw err(`field 'quantization_config' must be an object, got ${typeName(q)}`);
  const blk = q.has("weight_block_size") ? q.get("weight_block_size") : null;
  if (q.get("quant_method") !== "fp8" || blk === null) return;
  const high = BigInt(FIELD_LIMITS.weight_block_size.high);
  if (!(Array.isArray(blk) && blk.length === 2 && blk.every((x) => typeof x === "bigint" && x > 0n && x <= high)))
    throw err(`quantization_config.weight_block_size must be two positive integers (at most ${high}), got ${shownValue(blk)}`);
}

// ----------------------------------------------------------------------------- layout (derivations/config/layout.py)
function stageLayers(m, lay) {
  const l = m.l, pp = lay.pp;
  let split;
  if (lay.layers_per_stage !== null) {
    split = lay.layers_per_stage.slice();
    if (split.length > DATA.inputs.list_lengths.layers_per_stage)
      throw new ConfigError(`--layers-per-stage has ${split.length} entries; at most ${DATA.inputs.list_lengths.layers_per_stage}`, ["layers_per_stage"]);
    if (split.length !== pp) throw new ConfigError(`--layers-per-stage has ${split.length} entries, PP=${pp}`, ["layers_per_stage", "pp"]);
    if (split.some((x) => x < 1)) throw new ConfigError(`every stage needs at least one layer, got ${pyRepr(split)}`, ["layers_per_stage"]);
    const sum = split.reduce((a, b) => a + b, 0);
    if (sum !== l) throw new ConfigError(`--layers-per-stage sums to ${sum}, the model has ${l} layers`, ["layers_per_stage"]);
  } else {
    if (pp > l) throw new ConfigError(`PP=${pp} is larger than the ${l} layers of ${m.name}`, ["pp"]);
    const k = Math.ceil(l / pp);
    if (pp === 1) split = [l];
    else if (l - k * (pp - 1) >= 1) split = Array(pp - 1).fill(k).concat([l - k * (pp - 1)]);
    else {
      const base = Math.floor(l / pp), rem = l % pp;
      split = Array(rem).fill(base + 1).concat(Array(pp - rem).fill(base));
    }
  }
  const out = []; let start = 0;
  for (const n of split) { out.push([start, start + n]); start += n; }
  return out;
}
function compose(m, range, first, last, index) {
  let dense = 0;
  for (let i = range[0]; i < range[1]; i++) if (m.kinds[i] === "dense") dense++;
  // the family's own counts (Family.counts: DeepSeek's L_I), each its layers holding a feature (StageComposition.extra)
  const extra = {};
  for (const [sym, feature] of familyOf(m).counts) {
    extra[sym] = 0;
    for (let i = range[0]; i < range[1]; i++) if (m.features[i].includes(feature)) extra[sym]++;
  }
  return { index, layers: range, dense, moe: range[1] - range[0] - dense, embedding: first, head: last, extra };
}
function stages(m, lay) {
  const split = stageLayers(m, lay);
  return split.map((r, i) => compose(m, r, i === 0, i === split.length - 1, i));
}
function validateLayout(m, lay, seq) {
  const { tp, ep, etp, cp, dp } = lay;
  if (lay.sp !== null && lay.sp !== 1 && lay.sp !== tp)
    throw new ConfigError(`SP must be 1 (off) or equal TP=${tp}, got SP=${lay.sp}`, ["sp", "tp"]);
  // a family with no experts to split keeps EP = ETP = 1 (Family.layout_defaults)
  for (const [axis, one] of Object.entries(familyOf(m).layout_defaults))
    if (lay[axis] !== one)
      throw new ConfigError(`${axis.toUpperCase()}=${lay[axis]}: ${m.name} (${familyOf(m).title}) has no experts to split; ${axis.toUpperCase()} must be 1`, [axis]);
  // the family's rules in their order (Family.divides; the message its text formatted as layout.py formats it)
  const degrees = { DP: dp, TP: tp, PP: lay.pp, EP: ep, ETP: etp, CP: cp };
  for (const [, symbol, axis, text] of familyOf(m).divides) {
    if (symbol === null) { edpInteger(lay); continue; }
    if (BigInt(m.named[symbol]) % BigInt(lay[axis]))
      throw new ConfigError(text.replace(/\{(\w+)\}/g, (_, k) => (k === "name" ? m.name : String(k in degrees ? degrees[k] : m.named[k]))), [axis]);
  }
  if (lay.pp > m.l) throw new ConfigError(`PP=${lay.pp} is larger than the ${m.l} layers of ${m.name}`, ["pp"]);
  const SP = lay.sp === null ? tp : lay.sp;
  if (seq % cp) throw new ConfigError(`CP=${cp} must divide the sequence length s=${seq}`, ["cp", "seq"]);
  if (seq % (SP * cp))
    throw new ConfigError(`SP*CP=${SP * cp} must divide the sequence length s=${seq} (sequence parallelism splits the sequence over SP=${SP} ranks)`,
      ["seq", lay.sp === null ? "tp" : "sp", "cp"]);
  stageLayers(m, lay);
}
/** layout._edp: EDP = DP TP CP / (EP ETP), the data-parallel degree of the experts, an integer. */
function edpInteger(lay) {
  const { tp, ep, etp, cp, dp } = lay;
  const world = BigInt(dp) * BigInt(tp) * BigInt(cp), experts = BigInt(ep) * BigInt(etp);  // up to 2^60: exact
  if (world % experts) {
    const dtc = cp === 1 ? "DP*TP" : "DP*TP*CP";
    throw new ConfigError(`${dtc}=${world} must be divisible by EP*ETP=${experts} (EDP = ${dtc}/(EP*ETP) must be an integer; DP=${dp}, TP=${tp}, EP=${ep}, ETP=${etp}` + (cp !== 1 ? `, CP=${cp}` : "") + ")",
      ["dp", "tp", "ep", "etp"].concat(cp !== 1 ? ["cp"] : []));
  }
}
function validateTraining(t) {
  if (t.microbatches !== null && t.schedule === null)
    throw new ConfigError("--microbatches needs a pipeline schedule (--schedule)", ["microbatches", "schedule"]);
  if (t.vpp !== null) {
    if (t.schedule !== "interleaved")
      throw new ConfigError("--vpp applies to --schedule interleaved only, " + (t.schedule === null ? "add --schedule interleaved" : `got --schedule ${t.schedule}`), ["vpp", "schedule"]);
    if (t.vpp < 2) throw new ConfigError(`the interleaved schedule needs --vpp V >= 2, got ${t.vpp}`, ["vpp"]);
  }
  if (t.virtual_layers !== null && t.schedule !== "interleaved")
    throw new ConfigError("--virtual-layers applies to --schedule interleaved only, got " + (t.schedule ? `--schedule ${t.schedule}` : "no --schedule"),
      ["virtual_layers", "schedule"]);
  if (t.conventions.mtp && t.conventions.rank === "modelzoo")
    throw new ConfigError("--mtp counts the D MTP layers' parameters on the last stage (--rank stage) or in Megatron's most-loaded shard (--rank megatron); the ModelZoo rank counts none",
      ["mtp", "rank", "conventions"]);
  // training.validate_training's refusals of the options, the table computed from it (memsym/page/data.py _refusals)
  const R = DATA.refusals, c = t.conventions;
  const at = { linear_recipe: t.linear_recipe !== null, quantized_params: t.quantized_params, fp8: t.fp8, head_state: c.head_state,
    norm_storage: c.norm_storage, zero: t.zero, offload: t.offload.length > 0, full: t.recompute === "full" };
  const i = R.table[R.axes.reduce((k, [name, values]) => k * values.length + values.indexOf(at[name]), 0)];
  if (i >= 0) throw new ConfigError(R.messages[i][1], [R.messages[i][0], "conventions", "zero", "fp8_activations", "recompute"]);
}

/** sides.check_mtp: --mtp and --mtp-activations last-stage refused for a family without MTP modules. */
function checkMtp(m, t) {
  const c = t.conventions;
  if (!familyOf(m).mtp && (c.mtp || c.mtp_activations !== "none")) {
    const opt = c.mtp ? "--mtp" : `--mtp-activations ${c.mtp_activations}`;
    throw new ConfigError(`${opt}: ${m.name} (${familyOf(m).title}) has no multi-token-prediction modules`, [c.mtp ? "mtp" : "mtp_activations"]);
  }
}

// ----------------------------------------------------------------------------- schedules (derivations/assembly/schedules.py)
function validateSchedule(name, pp, m) {
  if (name === "dualpipe") {
    if (pp % 2) throw new ConfigError(`DualPipe needs an even number of pipeline stages, got PP=${pp}`, ["pp", "schedule"]);
    if (m !== null && (m % 2 || m < 2 * pp))
      throw new ConfigError(`DualPipe needs an even number of micro-batches m >= 2 PP = ${2 * pp}, got m = ${m} (--microbatches, or --global-batch / (DP mbs))`, ["microbatches", "schedule"]);
  }
}
function chunks(name, pp, index, m, vpp) {
  validateSchedule(name, pp, m);
  if (name === "interleaved" && vpp === null) vpp = 2;
  const e = { PP: Q.n(pp), i_s: Q.n(index), n_mb: m === null ? INF : Q.n(m), VPP: Q.n(vpp || 1) };
  // derivations/generated/<family>.py inflight: the schedules', the same in every family's module
  return Object.values(ASSEMBLY)[0].inflight(name, e).map(([which, n, part]) => ({ stage: which === "own" ? index : pp - 1 - index,
    inflight: n, part }));
}
// a chunk's part of its stage's composition (schedules.Chunk.composition): all, its layers, or its head
function partComposition(comp, part) {
  if (part === "layers") return Object.assign({}, comp, { head: false });
  if (part === "head")
    return Object.assign({}, comp, { dense: 0, moe: 0, embedding: false, extra: Object.fromEntries(Object.keys(comp.extra).map((k) => [k, 0])) });
  return comp;
}
function heldStages(name, pp, index) { return name === "dualpipe" ? [index, pp - 1 - index] : [index]; }

// ----------------------------------------------------------------------------- the substitution (config.substitution)
function substitution(m, lay, t, comp) {
  const e = {};
  for (const [k, x] of Object.entries(m.named)) e[k] = Q.n(x);  // ModelSpec.named
  Object.assign(e, { DP: Q.n(lay.dp), TP: Q.n(lay.tp), PP: Q.n(lay.pp), EP: Q.n(lay.ep), ETP: Q.n(lay.etp), CP: Q.n(lay.cp),
    SP: Q.n(lay.sp === null ? lay.tp : lay.sp) });
  e.b = Q.n(t.mbs); e.s = Q.n(t.seq);
  for (const [k, v] of Object.entries(DATA.options.extension_defaults)) e[k] = Q.parse(v);
  for (const [k, v] of Object.entries(t.bytes)) e[k] = v;
  e.F = t.imbalance;
  if (t.microbatches !== null) e.n_mb = Q.n(t.microbatches);
  if (t.vpp !== null) e.VPP = Q.n(t.vpp);
  e.z = Q.n(t.zero);
  if (comp) Object.assign(e, subsComposition(comp));
  return e;
}

// ----------------------------------------------------------------------------- the activation view
/** generate.features_of_view: the view's features as derivations/generate.py's decision tables read them. */
function viewKey(t) {
  const a = { attention: t.attention, fp8: t.fp8 ? "1" : "0" };
  for (const k of Object.keys(DATA.options.switches)) a[k] = t.conventions[k];
  for (const o of Object.keys(DATA.options.recompute_ops)) a["op:" + o] = t.recompute_ops.includes(o) ? "1" : "0";
  return a;
}
function keptUnits(m, t) {
  const feats = DATA.features, a = viewKey(t), rc = t.recompute, out = {};
  for (const kind of Object.keys(familyOf(m).device.kinds)) out[kind] = [];
  for (const u of familyOf(m).activations[activationKey(m)]) {
    // the table's entry: the features' value indices in itertools.product order (memsym/page/data.py)
    const fs = rc === "custom" ? u.feats : u.feats.filter((f) => !f.startsWith("op:"));
    const at = fs.reduce((k, f) => k * feats[f].length + feats[f].indexOf(a[f]), 0);
    const i = fs.every((f) => feats[f].includes(a[f])) ? u.table[rc][at] : undefined;
    if (i === undefined) throw new Error(`no table entry ${rc} ${at} for ${u.key}`);
    if (i !== null) out[u.kind].push({ unit: u, fn: i });
  }
  return out;
}
function kindValues(m, kept, e) {  // derivations.evaluate.activation_values: each kind's kept tensors
  const out = {};
  // a tensor of the shared lists that reads a dimension the model's family lacks (device.py: MissingSymbol)
  for (const list of Object.values(kept)) for (const k of list) for (const sym of DATA.reads[k.fn])
    if (e[sym] === undefined)
      throw new ConfigError(`${m.name}: a term of this configuration reads the symbol ${sym}, which the model does not define (its family has no such dimension)`, []);
  for (const [kind, list] of Object.entries(kept)) out[kind] = Q.add(...list.map((k) => FNS[k.fn](e)));
  return out;
}

// ----------------------------------------------------------------------------- one device (device._estimate)
/* Nothing below adds or multiplies a byte: it gathers the inputs of the per-device assembly (compositions, chunks,
   model states, each activation kind's bytes) and evaluates the printed assembly (ASSEMBLY, memsym/page/pyjs.py). */
const compKey = (c) => `${c.dense}|${c.moe}|${c.embedding ? 1 : 0}|${c.head ? 1 : 0}|${Object.values(c.extra).join("|")}`;
/** The generated device's arguments: MTP modules' activations, full recomputation, how activations are held (one
    micro-batch, a schedule's chunks, --virtual-layers' given states; or ``holds``), the options' terms. */
function variantOf(t, holds) {
  return [t.conventions.mtp_activations === "last-stage", t.recompute === "full",
    holds || (t.virtual_layers !== null ? "given" : (t.schedule !== null ? "schedule" : "paper")), t.linear_recipe !== null || t.offload.length > 0];
}
/** The generated assembly (derivations/generated/<family>.py device) of the variant at ``inputs``. */
function assemble(m, variant, inputs) {
  const [mtp, full, holds, options] = variant;
  return ASSEMBLY[m.family].device(mtp, full, holds, Object.assign({}, inputs), options);
}
/** (L_d, L_m, e_E, e_H and the family's counts) of the stages a device holds, summed, with --mtp under the stage
    rank (sides.mtp_stage_shift: the MTP modules on the last stage with the features an MTP block holds, and its
    copy of the embedding). */
function heldComposition(m, lay, t, held) {
  const count = (f) => held.reduce((a, c) => a + f(c), 0);
  const out = { L_d: count((c) => c.dense), L_m: count((c) => c.moe), e_E: count((c) => (c.embedding ? 1 : 0)),
    e_H: count((c) => (c.head ? 1 : 0)) };
  for (const [sym] of familyOf(m).counts) out[sym] = count((c) => c.extra[sym]);
  if (t.conventions.mtp && out.e_H) {
    const copy = (m.tie_word_embeddings || lay.pp === 1 || !m.mtp_layers || out.e_E) ? 0 : out.e_H;
    out.L_m += m.mtp_layers * out.e_H;
    out.e_E += copy;
    for (const [sym, feature] of familyOf(m).counts) if (m.mtp_features.includes(feature)) out[sym] += m.mtp_layers * out.e_H;
  }
  return Object.fromEntries(Object.entries(out).map(([k, x]) => [k, Q.n(x)]));
}
/** The model states of the held stages (device._model_states): the weight side's printed terms at the
    held composition, or at the whole model for Megatron's shard. */
function modelStates(m, lay, t, held, subs, cached) {
  const side = familyOf(m).states[structureKey(m)][`${t.conventions.rank}/${t.conventions.shared_expert}`];
  if (side.refused) throw new ConfigError(side.refused.split("{name}").join(m.name), ["conventions", "rank", "shared_expert"]);
  const ids = Object.assign({}, side.ids[String(t.zero)]);
  let at, key;
  if (t.conventions.rank === "megatron") {
    key = "megatron";
    at = () => Object.assign(substitution(m, lay, t, compose(m, [0, m.l], true, true, 0)),
      { D: Q.n(t.conventions.mtp ? m.mtp_layers : 0) });
  } else {
    const sums = heldComposition(m, lay, t, held);
    key = Object.values(sums).map(Q.str).join("|");
    at = () => Object.assign({}, subs, sums);
  }
  return cached("states:" + key, () => {
    const d = at(), bytes = {};
    for (const k of ["weights", "gradients", "optimizer"]) bytes[k] = FNS[side.terms[ids[k]]](d);
    if (t.linear_recipe !== null) {  // TE's cached quantized weight copies (quantized.copies), beside the weights
      if (t.conventions.rank !== "stage")
        throw new ConfigError(`--linear-recipe counts TE's weight copies on the device of a stage (--rank stage), not --rank ${t.conventions.rank}`, ["linear_recipe", "rank", "conventions"]);
      const lin = side.linear === undefined ? Q.n(0) : FNS[side.linear](d), w = Q.parse(DATA.quantized.bytes[t.linear_recipe][1]);
      bytes.weights = Q.add(bytes.weights, Q.mul(lin, w), t.quantized_params ? Q.mul(-1, lin, t.bytes.B_w) : 0);
    }
    return { bytes, ids, P_n: FNS[side.P_n](d), P_m: FNS[side.P_m](d), params_id: side.params_id };
  });
}
/** The assembly's inputs for device ``index`` (device._inputs and _assemble). */
function deviceInputs(m, lay, t, index, all, cached) {
  const comp = all[index];
  const subs = cached("subs:" + compKey(comp), () => substitution(m, lay, t, comp));
  const kept = cached("kept", () => keptUnits(m, t));
  const kinds = cached("kinds", () => kindValues(m, kept, subs));  // a kind's bytes read no composition
  const ch = t.schedule !== null ? chunks(t.schedule, lay.pp, index, t.microbatches, t.vpp) : [];
  const held = t.schedule !== null ? heldStages(t.schedule, lay.pp, index).map((i) => all[i]) : [comp];
  const states = modelStates(m, lay, t, held, subs, cached);
  const ranked = t.virtual_layers !== null ? rankChunks(m, lay, t, comp) : null;
  const rb = t.conventions.runtime_buffers;
  const e = Object.assign({}, subs, states.bytes, { runtime: rb && rb !== "none" ? Q.parse(DATA.options.runtime_buffers[rb]) : Q.n(0) });
  const dev = familyOf(m).device;
  for (const [kind, sym] of Object.entries(dev.kinds)) e[sym] = kinds[kind] === undefined ? Q.n(0) : kinds[kind];
  if (t.linear_recipe !== null || t.offload.length) Object.assign(e, optionInputs(m, t, kept, subs, comp, cached));
  for (let c = 0; c < dev.chunks; c++) {
    const part = c < ch.length ? subsComposition(partComposition(all[ch[c].stage], ch[c].part)) : {};
    // the composition and the family's counts (DeepSeek-V4's L_C, L_H): device_terms.composition
    for (const k of ["L_d", "L_m", "e_E", "e_H", ...familyOf(m).counts.map(([sym]) => sym)])
      e[`${k}_${c}`] = part[k] === undefined ? Q.n(0) : part[k];
    e[`n_fl_${c}`] = c < ch.length ? ch[c].inflight : Q.n(0);
  }
  if (ch.length > dev.chunks) throw new Error(`the device assembly has ${dev.chunks} chunks, the schedule ${ch.length}`);
  const virtual = ranked === null ? null : virtualPeak(m, lay, t, comp.index, ranked, e);
  return { comp, held, chunks: ch, kept, subs, states, inputs: e, virtual };
}
/** device._option_inputs: O_D, O_E, O_R of --offload-activations, Q_D, Q_E, Q_H of --linear-recipe; 0 when off. */
function optionInputs(m, t, kept, subs, comp, cached) {
  const zero = Q.n(0), out = { O_D: zero, O_E: zero, O_R: zero, Q_D: zero, Q_E: zero, Q_H: zero };
  if (t.offload.length) {
    const off = cached("offload", () => offloaded(m, t, kept, subs));
    // offload.resident: the rank's last decoder layer of micro-batch 0 keeps its tensors (none on a stage with the
    // MTP modules' activations: their layer is the one kept)
    const none = comp.layers[1] === comp.layers[0] || (comp.head && t.conventions.mtp_activations === "last-stage" && m.mtp_layers);
    Object.assign(out, { O_D: off.dense, O_E: off.moe, O_R: none ? zero : off[m.kinds[comp.layers[1] - 1]] });
  }
  if (t.linear_recipe !== null) Object.assign(out, cached("quantized", () => quantizedInputs(m, t, kept, subs)));
  return out;
}
/** {kind: {tensor key: bytes}} of the kept tensors (evaluate.tensor_values). */
const tensorBytes = (kept, subs) => Object.fromEntries(Object.entries(kept).map(([kind, list]) =>
  [kind, Object.fromEntries(list.map((k) => [k.unit.key, FNS[k.fn](subs)]))]));
/** View.dropped: the core attention's internals recomputed (selective, or custom with score). */
const scoreRecomputed = (t) => t.recompute === "selective" || (t.recompute === "custom" && t.recompute_ops.includes("score"));
/** offload.per_layer: what one dense and one MoE layer micro-batch offloads: the kept tensors in the named modules'
    groups (DATA.offload.modules: offload.MODULE_TENSORS) of at least min_elements elements; a recomputed core
    attention runs outside the offload context. */
function offloaded(m, t, kept, subs) {
  if (m.family !== "deepseek")
    throw new ConfigError(`--offload-activations selects the tensors of Megatron-Core's MLA and MoE layers; ${m.name} is of the ${m.family} family`, ["offload_activations", "model"]);
  const O = DATA.offload, at = tensorBytes(kept, subs), sum = { mla: Q.n(0), moe: Q.n(0), dense: Q.n(0) };
  for (const module of t.offload) {
    if (module === "core_attn" && scoreRecomputed(t)) continue;
    for (const [kind, key, elem] of O.modules[module]) {
      const got = (at[kind] || {})[key];
      if (got && Q.cmp(got, Q.mul(O.min_elements, typeof elem === "string" ? subs[elem] : Q.n(elem))) >= 0) sum[kind] = Q.add(sum[kind], got);
    }
  }
  return { dense: Q.add(sum.mla, sum.dense), moe: Q.add(sum.mla, sum.moe) };
}
/** offload.moment_parts: the bytes the backward of an offloaded layer's unfused core attention reloads and makes
    (step.offload.core_attn), or null when there is none. */
function offloadMoment(m, t, d, cached) {
  if (t.attention !== "eager" || !t.offload.includes("core_attn") || scoreRecomputed(t)) return null;
  const full = tensorBytes(cached("kept:none", () => keptUnits(m, stepTrainings(t)[1])), d.subs).mla;
  const kept = tensorBytes(d.kept, d.subs).mla, zero = Q.n(0), get = (k) => full[k] || zero;
  const big = (k) => (Q.cmp(get(k), Q.mul(DATA.offload.min_elements, d.subs.B_a)) >= 0 ? get(k) : zero);
  const qkv = Q.add(big("q"), big("k"), big("v"));
  return Q.add(Q.mul(2, big("softmax")), qkv, ["q", "k", "v"].every((k) => k in kept) ? zero : qkv,
    get("softmax"), get("v"), get("attn_out"));
}

// ----------------------------------------------------------------------------- --virtual-layers (schedules.py)
/** schedules.rank_chunks: the chunks of rank comp.index under Megatron's pipeline layout (virtual_chunks: virtual
    stage j holds the next virtual_layers[j] layers and runs on rank j mod PP as its chunk j // PP), refused when they
    are not the stage's dense and MoE counts or m is not a multiple of PP. */
function rankChunks(m, lay, t, comp) {
  const pp = lay.pp, v = t.vpp || 2, counts = t.virtual_layers, f = ["virtual_layers"];
  if (counts.length !== pp * v)
    throw new ConfigError(`--virtual-layers has ${counts.length} entries; PP x V = ${pp} x ${v} = ${pp * v} virtual stages`, f.concat(["pp", "vpp"]));
  const start = (j) => counts.slice(0, j).reduce((a, b) => a + b, 0);
  if (start(counts.length) !== m.l) throw new ConfigError(`--virtual-layers sums to ${start(counts.length)}, the model has ${m.l} layers`, f);
  const out = [];
  for (let c = 0; c < v; c++) {
    const j = c * pp + comp.index;
    out.push(compose(m, [start(j), start(j) + counts[j]], j === 0, j === pp * v - 1, comp.index));
  }
  const dense = out.reduce((a, c) => a + c.dense, 0), moe = out.reduce((a, c) => a + c.moe, 0);
  if (dense !== comp.dense || moe !== comp.moe) {
    const [a, b] = comp.layers, label = b - a === 1 ? `layer ${a}` : `layers ${a}-${b - 1}`;
    throw new ConfigError(`--virtual-layers gives stage ${comp.index} ${dense} dense and ${moe} MoE layers, memsym's contiguous stage (${label}) ${comp.dense} and ${comp.moe}: the layout is modelled when each rank holds the dense and MoE counts of a contiguous split (--layers-per-stage: the per-rank sums)`,
      f.concat(["layers_per_stage"]));
  }
  const mb = t.microbatches || 4 * pp;
  if (mb % pp)
    throw new ConfigError(`--virtual-layers simulates Megatron's interleaved order, which runs micro-batches in groups of PP=${pp}: m must be a multiple of PP, got m = ${mb} (--microbatches, or --global-batch / (DP mbs))`, f.concat(["microbatches"]));
  return out;
}
/** schedules.distinct_states and backward_states: the chunks' in-flight micro-batches after each forward of rank
    ``index`` in Megatron-Core's interleaved 1F1B up to the end of its first steady-state period, and the steady
    states with the chunk whose backward runs next. */
function interleavedStates(pp, v, mb, index) {
  const warm = Math.min(2 * (pp - index - 1) + (v - 1) * pp, mb * v), until = Math.min(mb * v, warm + pp * v);
  const held = Array(v).fill(0), states = [];
  for (let f = 0, b = 0; f < until;) {
    held[Math.floor(f / pp) % v]++;
    f++;
    states.push(held.slice());
    if (f > warm) { held[v - 1 - Math.floor(b / pp) % v]--; b++; }
  }
  return { states, backward: states.slice(warm).map((st, k) => [st, v - 1 - Math.floor(k / pp) % v]) };
}
/** device._virtual_peak: the largest state of the rank's interleaved order, each chunk's one micro-batch (the head
    with the last) weighed by its in-flight count; {held, chunks: [[composition, in flight], ...], head: its count or
    null, before: the largest held before the backward of a chunk with layers (offloading)}. */
function virtualPeak(m, lay, t, index, chunks, inputs) {
  const variant = variantOf(t, "paper"), last = chunks[chunks.length - 1];
  const at = (c) => assemble(m, variant, Object.assign({}, inputs, subsComposition(c), { O_R: Q.n(0) })).activations;
  const bytes = chunks.map((c) => at(partComposition(c, "layers"))).concat([last.head ? at(partComposition(last, "head")) : Q.n(0)]);
  const heldAt = (st) => Q.add(...st.concat([st[st.length - 1]]).map((n, c) => Q.mul(n, bytes[c])));
  const { states, backward } = interleavedStates(lay.pp, chunks.length, t.microbatches || 4 * lay.pp, index);
  let held = null, state = null, before = null;
  for (const st of states) { const x = heldAt(st); if (held === null || Q.cmp(x, held) > 0) { held = x; state = st; } }
  for (const [st, c] of backward) {
    const x = heldAt(st);
    if (chunks[c].layers[1] > chunks[c].layers[0] && (before === null || Q.cmp(x, before) > 0)) before = x;
  }
  return { held, chunks: chunks.map((c, i) => [c, state[i]]), head: last.head ? state[state.length - 1] : null,
    before: before === null ? Q.n(0) : before };
}
/** quantized.per_layer (--linear-recipe): Q_D, Q_E, Q_H, what one held dense and one MoE layer micro-batch and the
    head part change by, from quantized._rows as data (DATA.quantized.rows, memsym/page/data.py) at the kept tensors'
    bytes; the assembly's other options' inputs 0. */
function quantizedInputs(m, t, kept, subs) {
  if (m.family !== "deepseek")
    throw new ConfigError(`--linear-recipe selects the tensors of Megatron-Core's MLA and MoE layers; ${m.name} is of the ${m.family} family`, ["linear_recipe", "model"]);
  const rows = DATA.quantized.rows[t.linear_recipe][t.attention], zero = Q.n(0), D = Q.n(m.named.D), bytes = tensorBytes(kept, subs);
  const total = (kind) => {
    const at = bytes[kind] || {};
    return Q.add(...rows[kind].filter(([, gates]) => gates.every((g) => at[g] && at[g].n !== 0n))
      .map(([, , value, coef]) => Q.mul(FNS[coef](subs), at[value])));
  };
  const mla = total("mla"), moe = total("moe");
  const mtp = t.conventions.mtp_activations === "last-stage" && t.recompute !== "full";
  const head = mtp ? Q.add(Q.mul(D, Q.add(mla, moe)), D.n !== 0n ? total("mtp") : zero) : zero;
  return { Q_D: Q.add(mla, total("dense")), Q_E: Q.add(mla, moe), Q_H: head };
}
const subsComposition = (c) => Object.assign({ L_d: Q.n(c.dense), L_m: Q.n(c.moe), e_E: Q.n(c.embedding ? 1 : 0), e_H: Q.n(c.head ? 1 : 0) },
  Object.fromEntries(Object.entries(c.extra).map(([k, x]) => [k, Q.n(x)])));
/** device.step_excess: what one micro-batch's backward holds above the end of its forward at the step's largest
    moment (step_terms.py), {bytes, id, fn, cast} (0, '' and null when none exceeds it); the first largest binds. */
function stepExcess(m, t, d, cached) {
  const dev = familyOf(m).device, conv = t.conventions;
  const framework = conv.head_state in dev.step ? conv.head_state : "paper";
  const moments = dev.step[framework][dev.step_policy[t.recompute]];
  const [plain, none] = stepTrainings(t);
  // a kind's bytes read no composition (deviceInputs): one evaluation for every stage
  const at = cached("kinds:plain", () => kindValues(m, keptUnits(m, plain), d.subs));
  const at0 = cached("kinds:none", () => kindValues(m, cached("kept:none", () => keptUnits(m, none)), d.subs));
  const zero = Q.n(0), v = Object.assign({}, d.inputs);
  for (const [kind, sym] of Object.entries(dev.kinds)) {
    v[sym] = at[kind] === undefined ? zero : at[kind];
    if (sym in dev.step_none) v[dev.step_none[sym]] = at0[kind] === undefined ? zero : at0[kind];
  }
  for (const [name, [option, value]] of Object.entries(dev.step_indicators))  // step_terms.INDICATORS
    v[name] = Q.n((option === "attention" ? t.attention : conv[option]) === value ? 1 : 0);
  for (const [, fn] of moments) for (const sym of DATA.reads[fn]) if (v[sym] === undefined) v[sym] = zero;
  const own = d.inputs.M_H === undefined ? zero : d.inputs.M_H, eH = d.subs.e_H === undefined ? zero : d.subs.e_H;
  const minusCast = Q.mul(-1, eH, Q.add(own, Q.mul(-1, v.M_H === undefined ? zero : v.M_H)));
  let best = null;
  for (const [, fn, id] of moments) {
    const x = Q.add(FNS[fn](v), minusCast);
    if (best === null || Q.cmp(x, best.bytes) > 0) best = { bytes: x, id, fn };  // the first largest
  }
  if (best === null || Q.cmp(best.bytes, zero) <= 0) return { bytes: zero, id: "", fn: null, cast: Q.mul(-1, minusCast) };
  return Object.assign(best, { cast: Q.mul(-1, minusCast) });
}
/** step_names.trainings: the training whose kinds the step's moments read (no cross-entropy backward transient) and
    the same without recomputation. */
function stepTrainings(t) {
  const plain = Object.assign({}, t, { conventions: Object.assign({}, t.conventions, { ce_backward: "none" }) });
  return [plain, Object.assign({}, plain, { recompute: "none", recompute_ops: [] })];
}
/** One device of stage ``index``: its inputs and the generated assembly, the step excess and the total at the
    step's peak; ``memo`` shares what equal compositions give between stages. */
function device(m, lay, t, index, all, memo) {
  memo = memo || new Map();
  const cached = (key, fn) => { if (!memo.has(key)) memo.set(key, fn()); return memo.get(key); };
  const d = deviceInputs(m, lay, t, index, all, cached);
  // --virtual-layers: the held activations given (read as activations_held with the options' terms, else as activations)
  const held = d.virtual === null ? {} : { activations_held: d.virtual.held, activations: d.virtual.held };
  const v = assemble(m, variantOf(t), Object.assign({}, d.inputs, held));
  const rb = t.conventions.runtime_buffers, ids = Object.assign({}, d.states.ids);
  const bytes = Object.assign({}, d.states.bytes, { activations: v.activations });
  if (rb && rb !== "none") { bytes.runtime = v.runtime; ids.runtime = `runtime.buffers.${rb}`; }
  // one micro-batch's backward on any stage the device runs (device._held_step: DualPipe's mirror stage too)
  let step = stepExcess(m, t, d, cached);
  for (const comp of d.held) {
    if (comp.index === d.comp.index) continue;
    const subs = cached("subs:" + compKey(comp), () => substitution(m, lay, t, comp));
    const other = stepExcess(m, t, Object.assign({}, d, { subs, inputs: Object.assign({}, d.inputs, subs) }), cached);
    if (Q.cmp(other.bytes, step.bytes) > 0) step = other;
  }
  const moment = t.offload.length ? offloadMoment(m, t, d, cached) : null;
  if (moment !== null) {  // an offloaded layer's core-attention backward (offload.step_moment), when it holds more
    const before = d.virtual !== null ? d.virtual.before : Q.add(v.activations, Q.mul(-1, d.inputs.O_R));
    const x = Q.add(before, moment, Q.mul(-1, v.activations));
    if (Q.cmp(x, step.bytes) > 0) step = { bytes: x, id: DATA.offload.moment, fn: null, cast: Q.n(0) };
  }
  // device._estimate_at: the total at the step's peak, the end of the forward plus the step excess
  Object.assign(bytes, { total: v.total, step: step.bytes, step_total: Q.add(v.total, step.bytes),
    activations_per_microbatch: v.activations_per_microbatch, activations_per_layer: v.activations_per_layer });
  ids.step = step.id;
  const overheads = {};
  for (const [end, o] of Object.entries(DATA.overheads.ends))
    overheads[end] = { f_frag: Q.parse(o.f_frag), buffers: Q.parse(o.M_buf), fragmentation: v[`fragmentation_${end}`], peak: v[`peak_${end}`],
      step_peak: FNS[DATA.overheads.step_peak[end]]({ step_total: bytes.step_total }) };
  const P_n = d.states.P_n, P_m = d.states.P_m;
  return { stage: d.comp, held: d.held, chunks: d.chunks, params: { non_moe: P_n, moe: P_m, total: Q.add(P_n, P_m) }, bytes,
    ids, params_id: d.states.params_id, kept: d.kept, subs: d.subs, overheads, variant: `mtp${+variantOf(t)[0]}full${+variantOf(t)[1]}`, step,
    inflight: inflight(t, d) };
}
/** Estimate.inflight: the micro-batches in flight at the device's peak (--virtual-layers: weighed by each chunk's
    layers over the stage's), null without a schedule. */
function inflight(t, d) {
  if (t.schedule === null) return null;
  if (d.virtual === null) return Q.add(...d.chunks.filter((c) => c.part !== "head").map((c) => c.inflight));
  const layers = (c) => c.layers[1] - c.layers[0];
  return Q.div(Q.add(...d.virtual.chunks.map(([c, n]) => Q.n(n * layers(c)))), Q.n(Math.max(layers(d.comp), 1)));
}
/** shape.check_options: an option that changes none of the family's tensors is refused. */
function checkInert(m, t) {
  const fam = familyOf(m), inert = fam.inert;
  if (inert.fp8 && t.fp8)
    throw new ConfigError(`--fp8-activations: no tensor of ${fam.title} is cached in FP8 (the DeepSeek-V3 report's caching names MLA and MoE tensors)`, ["fp8_activations"]);
  const idle = t.recompute === "custom" ? t.recompute_ops.filter((o) => inert.ops.includes(o)) : [];
  if (idle.length) {
    const valid = Object.keys(DATA.options.recompute_ops).filter((o) => !inert.ops.includes(o));
    throw new ConfigError(`--recompute custom:${idle.join(",")}: no tensor of ${fam.title} is recomputed by it; its operators: ${valid.join(", ")}`, ["recompute"]);
  }
}
function estimate(m, lay, t, stageIndex) {
  validateLayout(m, lay, t.seq);
  validateTraining(t);
  checkInert(m, t);
  checkMtp(m, t);
  const all = stages(m, lay), memo = new Map();
  if (stageIndex === null) {
    if (t.schedule === null) stageIndex = lay.pp > 1 ? 1 : 0;
    else {  // the most-loaded stage (device.estimate_all: largest total at the step's peak; the first on ties)
      let worst = null, worstTotal = null;
      for (let i = 0; i < all.length; i++) {
        const total = device(m, lay, t, i, all, memo).bytes.step_total;
        if (worst === null || Q.cmp(total, worstTotal) > 0) { worst = i; worstTotal = total; }
      }
      return device(m, lay, t, worst, all, memo);
    }
  }
  if (stageIndex < 0 || stageIndex >= all.length)
    throw new ConfigError(`stage must be an integer in 0..${all.length - 1} (PP=${lay.pp}), got ${stageIndex}`, ["stage", "pp"]);
  return device(m, lay, t, stageIndex, all, memo);
}
