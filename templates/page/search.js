"use strict";
/* The layout search panel: `memsym search`'s rows and order, in floats as it computes, over printed functions (the
   estimate's FNS over floats; SEARCH_ASSEMBLY, TIME_PY, PLACEMENT, STEPTIME, SEARCH_FNS: memsym/page/search.py), or
   under a conventions preset and the options by the estimate's own device() (runtime.js); the logic mirrors the Python
   each names. */

const SEARCH = DATA.search;
/** How many rows the panel lists (memsym search's text default). */
const SEARCH_ROWS = 20;

// ----------------------------------------------------------------------------- numbers as numpy rounds them
/** numpy's rint: the nearest integer, halves to the even one. */
function rint(x) {
  const r = Math.round(x);
  return (r - x === 0.5 && r % 2 !== 0) ? r - 1 : r;
}
/** np.round(x, d), d > 0: rint(x * 10^d) / 10^d. */
function roundTo(x, d) { const f = 10 ** d; return rint(x * f) / f; }
function divisorsOf(n) {
  const small = [], large = [];
  for (let d = 1; d * d <= n; d++) if (n % d === 0) { small.push(d); if (d * d !== n) large.unshift(n / d); }
  return small.concat(large);
}
const gcdInt = (a, b) => { while (b) [a, b] = [b, a % b]; return a; };

// ----------------------------------------------------------------------------- the request (the command line)
/** The search of a page state: {command, options} or {skip: why} (nothing to search), or a ConfigError thrown as
    memsym search refuses its options.  The page's model, GPU, GPU count and the schedule options typed; the
    layout, ZeRO stage, recomputation and micro-batch size are what the search chooses (memsym search's defaults). */
function searchRequest(state) {
  const t = state.typed || {};
  if (!("gpus" in t)) return { skip: "gpus" };
  const m = state.model;
  const model = controlValue("model", "model");
  const o = { gpus: t.gpus, gpu: $("opt-gpu").value, globalBatch: "global_batch" in t ? t.global_batch : null,
    seqs: "seq" in t ? [t.seq] : SEARCH.seq, mbs: SEARCH.mbs, zeros: SEARCH.zeros, policies: SEARCH.policies,
    schedule: t.schedule || null, microbatches: "microbatches" in t ? t.microbatches : null, vpp: "vpp" in t ? t.vpp : null,
    attention: t.attention || "flash", perNode: SEARCH.gpus_per_node };
  // the conventions preset (its switches and attention under the typed) and the options search.py _options reads:
  // each configuration then evaluated by the estimate's device() (pushExact)
  const preset = controlValue("conventions"), options = ["offload_activations", "linear_recipe",
    "quantized_param_gather", "virtual_layers"].filter((d) => t[d] !== undefined && t[d] !== null && t[d] !== false);
  if (preset !== null) o.attention = t.attention || SEARCH.presets[preset].attention;
  o.exact = preset !== null || options.length > 0;
  const argv = ["memsym", "search"];
  if (model !== null) argv.push("--model", model === "config" ? "config.json" : model);
  argv.push("--gpus", String(o.gpus), "--gpu", o.gpu, "--efficiency", "peak");  // the page has no efficiency tables
  for (const d of ["global_batch", "seq", "schedule", "microbatches", "vpp", "attention"])  // each positive or a name
    if (t[d]) argv.push(`--${d.replace(/_/g, "-")}`, String(t[d]));
  if (preset !== null) argv.push("--conventions", preset);
  for (const d of options) argv.push(`--${d.replace(/_/g, "-")}`, ...(t[d] === true ? [] : [controlValue(d)]));
  const command = argv.map(shellWord).join(" ");
  if (m.family !== "deepseek")
    return { skip: "family", command, why: `memsym search runs the DeepSeek family's generated kernels; ${m.name} is ${familyOf(m).title}` };
  // the command line's checks (search.py, evaluation.configurations and pipeline, enumeration.enumerate_layouts)
  if (o.gpus > SEARCH.max_gpus)
    throw new ConfigError(`--gpus must be at most 2^20 = ${SEARCH.max_gpus.toLocaleString("en-US")} (the search's ceiling), got ${o.gpus}`, ["gpus"]);
  if (o.globalBatch !== null && o.microbatches !== null)
    throw new ConfigError("give --global-batch (sequences per step: m = global / (DP mbs)) or --microbatches, not both", ["global_batch", "microbatches"]);
  if (o.globalBatch !== null) o.schedule = o.schedule || "1f1b";
  if (!SEARCH.attentions.includes(o.attention)) throw new ConfigError(`search: no generated kernels for attention '${o.attention}' (eager or flash)`, ["attention"]);
  if (o.exact) {  // search.py _search and _options, evaluation.configurations (pipeline): the search's training
    const conventions = conventions_of(preset === null ? {}
      : Object.assign({ conventions: preset }, SEARCH.presets[preset]));
    const rank = conventions.rank, fw = SEARCH.frameworks[SEARCH.of_conventions[preset]];
    if (rank in SEARCH.rank_zero) o.zeros = [SEARCH.rank_zero[rank]];
    if (fw && o.schedule !== null && fw.refusals[o.schedule])
      throw py.error("framework", `--schedule ${o.schedule}: ${fw.refusals[o.schedule]}`);
    o.framework = fw || null;
    o.training = new Training({ schedule: o.schedule, microbatches: o.microbatches, vpp: o.vpp, attention: o.attention,
      conventions, offload: t.offload_activations || [], linear_recipe: t.linear_recipe || null,
      quantized_params: Boolean(t.quantized_param_gather), virtual_layers: t.virtual_layers || null });
    validate_training(o.training);
    const refused = (SEARCH.recipe_refusals[o.gpu] || {})[t.linear_recipe];  // the step time's (steptime/evaluate.py check)
    if (refused) throw py.error("linear-recipe", refused);
  }
  return { command, options: o };
}

// ----------------------------------------------------------------------------- the layouts (enumeration.py)
/** The valid layouts of ``o.gpus`` GPUs in the lattice's order (TP, PP, CP, EP, ETP ascending) and the candidates
    each rule rejected first (enumeration.lattice, layout_rules: validate_layout's rules in its order). */
function enumerateLayouts(m, o) {
  const fam = familyOf(m), named = m.named, D = divisorsOf(o.gpus);
  const axis = (a) => {  // _axis_divisors: the divisors of every dimension the family's rules split by the axis
    const sizes = fam.divides.filter((d) => d[2] === a && d[1]).map((d) => Number(named[d[1]]));
    return sizes.length ? divisorsOf(sizes.reduce(gcdInt)) : [1];
  };
  const E = axis("ep"), F = axis("etp"), out = [], rejected = {};
  let candidates = 0;
  const dims = Object.fromEntries(Object.entries(named).map(([k, x]) => [k, Number(x)]));
  const rules = (lay) => {  // the first rule broken (enumeration.layout_rules, printed)
    for (const [rule, bad] of layout_rules(dims, fam.divides, m.l, lay, o.seqs, o.perNode)) if (bad) return rule;
    return null;
  };
  for (const tp of D) for (const pp of D) {
    if (o.gpus % (tp * pp) !== 0) continue;
    const rest = o.gpus / (tp * pp);
    for (const cp of D) {
      if (rest % cp !== 0) continue;
      const dp = rest / cp, dtc = dp * tp * cp;
      for (const ep of E) for (const etp of F) {
        if (dtc % ep !== 0 || (dtc / ep) % etp !== 0) continue;
        candidates++;
        const lay = { dp, tp, pp, ep, etp, cp };
        const rule = rules(lay);
        if (rule === null) out.push(lay);
        else rejected[rule] = (rejected[rule] || 0) + 1;
      }
    }
  }
  return { layouts: out, rejected, candidates };
}

// ----------------------------------------------------------------------------- the devices (analyses/exact.py)
/** The estimate's printed functions (FNS) and the printed assembly (SEARCH_ASSEMBLY) over floats, as the command
    line's search evaluates the printed exact Python over float64 (analyses/vectorized.py ``printed``). */
const NUMBERS = new Map();
const number = (text) => NUMBERS.get(text) ?? (NUMBERS.set(text, Number(text)), Number(text));
const FLOAT = {
  n: (a, b) => (b === undefined ? number(a) : number(a) / number(b)), of: Number, float: (a) => a,
  add(a, b) {
    let x = a + (b === undefined ? 0 : b);
    for (let i = 2; i < arguments.length; i++) x += arguments[i];
    return x;
  },
  mul(a, b) {
    let x = a * (b === undefined ? 1 : b);
    for (let i = 2; i < arguments.length; i++) x *= arguments[i];
    return x;
  },
  div: (a, b) => a / b, pow: (a, k) => a ** k, floor: Math.floor, min: Math.min, max: Math.max,
  eq: (a, b) => a === b, le: (a, b) => a <= b, lt: (a, b) => a < b,
};
const FNS_FLOAT = FNS_OF(FLOAT), ASSEMBLY_FLOAT = SEARCH_ASSEMBLY(FLOAT);
/** The printed assembly's function of a training's variant (runtime.js variantOf, without the options' terms). */
const assemblyOf = (t) => ASSEMBLY_FLOAT.DEVICE[variantOf(t).slice(0, 3)];
const floats = (values) => Object.fromEntries(Object.entries(values).map(([k, x]) => [k, Q.float(x)]));
/** The symbols of a layout and (s, b) a device's values hold beside the model's (pushDevices). */
const ROW_SYMBOLS = ["DP", "TP", "PP", "EP", "ETP", "CP", "SP", "b", "s"];
/** The row symbols the printed functions ``fns`` (indices into FNS) read. */
const rowsRead = (fns) => ROW_SYMBOLS.filter((k) => fns.some((fn) => DATA.reads[fn].includes(k)));
/** The values the step time's parameter counts are computed at: the model's, the paper's bytes and the extension
    defaults (config.named(model, None, Training())), exact. */
function searchValues(m) {
  const e = {};
  for (const [k, x] of Object.entries(m.named)) e[k] = Q.n(String(x));
  for (const [k, v] of Object.entries(DATA.options.extension_defaults)) e[k] = Q.parse(v);
  for (const [k, v] of Object.entries(DATA.options.paper_bytes)) e[k] = Q.parse(v);
  e.F = Q.parse(DATA.options.training.imbalance);
  return e;
}
/** The search's context: memsym search's training (the paper's conventions and bytes), each policy's kept tensors,
    those the step's moments read (device.step_inputs) and its ZeRO stages' choices, the weight side's model-state
    terms, the model's values as floats, each PP's stages (and the distinct ones: distinct_stages) and the memos. */
function searchContext(m, o) {
  const O = DATA.options, fam = familyOf(m), dev = fam.device, conv = { mtp: false };
  for (const [k, s] of Object.entries(O.switches)) conv[k] = s.values[0];
  const base = { mbs: o.mbs[0], seq: o.seqs[0], zero: 0, recompute_ops: [], attention: o.attention, fp8: false,
    imbalance: Q.parse(O.training.imbalance), schedule: o.schedule, microbatches: null, vpp: o.vpp,
    conventions: conv, bytes: Object.fromEntries(Object.entries(O.paper_bytes).map(([k, v]) => [k, Q.parse(v)])),
    linear_recipe: null, quantized_params: false, offload: [], virtual_layers: null };
  const framework = conv.head_state in dev.step ? conv.head_state : "paper", indicators = {};
  for (const [name, [option, value]] of Object.entries(dev.step_indicators))  // step_names.indicators
    indicators[name] = (option === "attention" ? o.attention : conv[option]) === value ? 1 : 0;
  const fns = (kept) => Object.values(kept).flat().map((k) => k.fn);
  const policies = o.policies.map((r, ri) => {
    const t = Object.assign({}, base, { recompute: r }), [plain, none] = trainings(t);
    const p = { kept: keptUnits(m, t), plain: keptUnits(m, plain), none: keptUnits(m, none),
      moments: dev.step[framework][dev.step_policy[r]], assemble: assemblyOf(t) };
    const moments = p.moments.map(([, fn]) => fn);
    return Object.assign(p, { kindReads: rowsRead([p.kept, p.plain, p.none].flatMap(fns)),
      stepReads: rowsRead(moments), momentReads: [...new Set(moments.flatMap((fn) => DATA.reads[fn]))],
      choices: o.zeros.map((z) => ({ z, r, ri, at: o.zeros.indexOf(z) * o.policies.length + ri })) });
  });
  const side = fam.states[structureKey(m)][`${conv.rank}/${conv.shared_expert}`];
  const stateFns = Object.values(side.ids).flatMap((ids) => Object.values(ids).map((id) => side.terms[id]));
  const stageTable = (pp) => memoised(ctx, "stages", pp, () => {
    const all = stages(m, { pp, layers_per_stage: null }), seen = new Set(), distinct = [];
    for (const comp of all) {
      if (seen.has(compKey(comp))) continue;
      seen.add(compKey(comp));
      distinct.push({ comp, index: comp.index, vec: SEARCH.composition.map((n) => Q.float(subsComposition(comp)[n])) });
    }
    return { all, distinct };
  });
  const ctx = { m, o, fam, dev, base, policies, side, indicators, stageTable, memo: {}, fixed: floats(searchValues(m)),
    stateReads: rowsRead(stateFns), choices: policies.flatMap((p) => p.choices).sort((a, b) => a.at - b.at) };
  return ctx;
}
/** A number naming ``x`` (its JSON) in the search, for the memos' keys. */
function intern(ctx, x) {
  const ids = memoised(ctx, "ids", "", () => new Map()), key = JSON.stringify(x);
  if (!ids.has(key)) ids.set(key, ids.size);
  return ids.get(key);
}
/** ``fn()`` once per distinct ``key`` in the memo ``name`` (analyses/vectorized.py Memo). */
function memoised(ctx, name, key, fn) {
  const memo = ctx.memo[name] || (ctx.memo[name] = new Map());
  let got = memo.get(key);
  if (got === undefined) memo.set(key, got = fn());
  return got;
}
/** Each kind's bytes of one layer's kept tensors (evaluate.activation_values; runtime.js kindValues), floats. */
function kindBytes(ctx, kept, e) {
  const out = {};
  for (const [kind, sym] of Object.entries(ctx.dev.kinds))
    out[sym] = kind in kept ? kept[kind].reduce((a, k) => a + FNS_FLOAT[k.fn](e), 0) : 0;
  return out;
}
/** The devices of a layout's pipeline (its distinct stages, or every stage under a schedule at m micro-batches): the
    assembly's inputs of each one's composition and chunks (schedules.chunks), the summed composition of the stages
    whose model states it holds and those whose backward it runs (DualPipe's mirror too: device._held_step). */
function devicesOf(ctx, lay, mm) {
  const o = ctx.o, table = ctx.stageTable(lay.pp);
  const names = ["L_d", "L_m", "e_E", "e_H", ...ctx.fam.counts.map((c) => c[0])];
  return memoised(ctx, "devices", `${lay.pp}|${mm}`, () => (o.schedule === null ? table.distinct.map((d) => d.comp)
    : table.all).map((comp) => {
    const held = o.schedule === null ? [comp] : held_stages(o.schedule, lay.pp, comp.index).map((i) => table.all[i]);
    const ch = o.schedule === null ? [] : chunks(o.schedule, lay.pp, comp.index, mm < 0 ? null : mm, o.vpp);
    // reused by every row: the paper's and a schedule's assembly compute every value they read but these
    const inputs = Object.assign(floats(subsComposition(comp)), { D: ctx.fixed.D || 0, runtime: 0 });
    for (let c = 0; c < ctx.dev.chunks; c++) {
      const part = c < ch.length ? floats(subsComposition(partComposition(table.all[ch[c].stage], ch[c].part))) : {};
      for (const k of names) inputs[`${k}_${c}`] = part[k] || 0;
      inputs[`n_fl_${c}`] = c < ch.length ? Q.float(ch[c].inflight) : 0;
    }
    const steps = held.map((h) => floats(subsComposition(h)));
    const sums = floats(heldComposition(ctx.m, lay, ctx.base, held));
    return { index: comp.index, inputs, steps, stepId: intern(ctx, steps), held: sums, heldId: intern(ctx, sums) };
  }));
}
/** device.step_excess in floats: the step's largest moment above the end of one micro-batch's forward (0 when none
    exceeds it) at the compositions ``at`` (the first largest), from the policy's ``kinds`` (device.step_inputs). */
function searchStep(ctx, p, e, kinds, at) {
  const v = Object.assign({}, kinds.plain, ctx.indicators);
  for (const [sym, bare] of Object.entries(ctx.dev.step_none)) v[bare] = kinds.none[sym];
  for (const k of p.momentReads) if (v[k] === undefined) v[k] = e[k] === undefined ? 0 : e[k];  // 0: not in the family
  let best = 0;
  for (const comp of at) {
    Object.assign(v, comp);
    const cast = (comp.e_H || 0) * ((kinds.own.M_H || 0) - (v.M_H || 0));
    for (const [, fn] of p.moments) best = Math.max(best, FNS_FLOAT[fn](v) - cast);
  }
  return best;
}
/** Every choice's most-loaded device (the largest total at the step's peak, the first on ties) of a layout at (s,
    b) and m micro-batches (-1: as many as fill the pipeline) pushed to ``rows`` ({c, stage, total, parts}); what
    reads fewer values than a device once per distinct value of those (the kinds, the model states, the step). */
function pushDevices(ctx, lay, s, b, mm, rows) {
  const e = Object.assign({}, ctx.fixed, { DP: lay.dp, TP: lay.tp, PP: lay.pp, EP: lay.ep, ETP: lay.etp, CP: lay.cp,
    SP: lay.tp, b, s });
  const devices = devicesOf(ctx, lay, mm), best = [], read = ctx.stateReads.map((k) => e[k]).join("|");
  const states = devices.map((d) => memoised(ctx, "states", `${d.heldId}|${read}`, () => {  // device._model_states
    const v = Object.assign({}, e, d.held), at = (z, k) => FNS_FLOAT[ctx.side.terms[ctx.side.ids[z][k]]](v);
    return ctx.o.zeros.map((z) => ({ weights: at(z, "weights"), gradients: at(z, "gradients"),
      optimizer: at(z, "optimizer") }));
  }));
  ctx.policies.forEach((p, pi) => {
    const key = `${pi}|${p.kindReads.map((k) => e[k])}`;
    const kinds = memoised(ctx, "kinds", key, () => ({ own: kindBytes(ctx, p.kept, e),
      plain: kindBytes(ctx, p.plain, e), none: kindBytes(ctx, p.none, e) }));
    // the step reads the kinds, a few of the row's values and the compositions (each distinct one: stepId)
    const steps = memoised(ctx, "step", `${key}|${p.stepReads.map((k) => e[k])}`, () => new Map());
    devices.forEach((d, j) => {
      const inputs = Object.assign(d.inputs, kinds.own);
      let step = steps.get(d.stepId);
      if (step === undefined) steps.set(d.stepId, step = searchStep(ctx, p, e, kinds, d.steps));
      p.choices.forEach((c, zi) => {
        const v = p.assemble(Object.assign(inputs, states[j][zi])), total = v.total + step;
        if (best[c.at] === undefined || total > best[c.at].total)
          best[c.at] = { c, stage: d.index, total, parts: { ...states[j][zi], activations: v.activations + step } };
      });
    });
  });
  for (const r of best) rows.push(Object.assign(r, { lay, s, b, m: ctx.o.schedule === null ? null : mm }));
}

/** pushDevices by the estimate's own device() (runtime.js, exact) under a conventions preset or the options the
    float kernels do not take (--offload-activations, --linear-recipe, --virtual-layers): memsym search's rows, which
    equal estimate's (analyses/exact.py); a configuration's refusal thrown (exact.py _refusal: the estimate's checks at
    each choice, then the devices': --virtual-layers' rank chunks, a recipe's rank). */
const withChoice = (t, c, kw) => py.replace(t, new Map(Object.entries(Object.assign({ zero: c.z, recompute: c.r },
  kw))));
function pushExact(ctx, lay, s, b, mm, rows) {
  const o = ctx.o, m = ctx.m, table = ctx.stageTable(lay.pp);
  const layout = new Layout(Object.assign({ sp: null, layers_per_stage: null }, lay));
  const at = o.schedule === null ? table.distinct.map((d) => d.index) : table.all.map((c) => c.index);
  const ts = ctx.exact.map((c) => [c, withChoice(o.training, c, { mbs: b, seq: s,
    microbatches: mm < 0 ? o.microbatches : mm })]);
  for (const [, t] of ts) {
    check_mtp(m, t.conventions);
    validate_training(t);
    check_options(specOf(m), t);
  }
  const got = ts.map(([c, t]) => {
    const memo = new Map();
    return [c, at.map((i) => device(m, layout, t, i, table.all, memo))];
  });
  for (const [c, devices] of got) {
    let d = devices[0];  // the most loaded: the largest total at the step's peak, the first on ties
    for (const x of devices) if (Q.cmp(x.bytes.step_total, d.bytes.step_total) > 0) d = x;
    const f = (k) => Q.float(d.bytes[k]);
    rows.push({ c, stage: d.stage.index, total: f("step_total"), lay, s, b, m: o.schedule === null ? null : mm,
      parts: { weights: f("weights"), gradients: f("gradients"), optimizer: f("optimizer"),
        activations: Q.float(Q.add(d.bytes.activations, d.bytes.step)) } });
  }
}

// ----------------------------------------------------------------------------- the views (evaluation.py)
/** Every configuration at its most-loaded device: one micro-batch per stage (the paper's view), or under the
    schedule with m = G / (DP b) micro-batches; the configurations whose m is not an integer, or that DualPipe
    refuses, counted (exact.py _vector). */
function* searchRows(ctx, layouts, rows, invalid) {
  const o = ctx.o;
  for (const lay of layouts) {
    for (const s of o.seqs) for (const b of o.mbs) {
      let mm = o.microbatches === null ? -1 : o.microbatches;
      if (o.globalBatch !== null) {
        if (o.globalBatch % (lay.dp * b) !== 0) {
          invalid["global-batch"] = (invalid["global-batch"] || 0) + 1;
          continue;
        }
        mm = o.globalBatch / (lay.dp * b);
      }
      try {
        if (o.schedule !== null) validate_schedule(o.schedule, lay.pp, mm < 0 ? o.microbatches : mm, o.vpp);
        (o.exact ? pushExact : pushDevices)(ctx, lay, s, b, mm, rows);
      } catch (e) {  // a refused configuration (exact.py _refusal): counted under a schedule, else the search refused
        if (!(e instanceof ConfigError) || o.schedule === null) throw e;
        let rule = e.constraint || e.fields[0].replace(/_/g, "-");
        if (rule.startsWith(`${o.schedule}-`)) rule = o.schedule;
        invalid[rule] = (invalid[rule] || 0) + 1;
      }
    }
    yield;
  }
}
// ----------------------------------------------------------------------------- the step time (steptime/evaluate.py)
/** The step time's inputs shared by every row (evaluate._model_constants over the printed STEPTIME.constants, the
    GPU's rates and the overlap switches) and the per-(tp, ep, etp) device parameter coefficients
    (evaluate._device_coefficients), exact then floats. */
function timeContext(ctx) {
  const m = ctx.m, o = ctx.o, e = searchValues(m), params = SEARCH_FNS.params[structureKey(m)], S = STEPTIME;
  const gpu = SEARCH.gpus[o.gpu] || SEARCH.gpus[SEARCH.default_gpu], rate = gpu.rates;
  const v = Object.fromEntries(Object.entries(e).map(([k, x]) => [k, Q.float(x)]));
  const p = Object.fromEntries([...S.PARAMETER_TERMS.map(([n]) => n), ...S.EXTRA_TERMS]
    .map((n) => [n, Q.float(params[n](e))]));
  // the linear recipe's GEMM rate and cast bytes (RECIPE_RATES, RECIPE_BYTES); no FP8 dispatch; the MTP modules trained
  const t = o.training, [precision, cast] = SEARCH.recipes[t ? t.linear_recipe : null];
  const k = S.constants(v, p, false, cast, 0, t && t.conventions.mtp_activations !== "none" ? m.mtp_layers : 0);
  const base = Object.assign(Object.fromEntries(S.DIMENSIONS.map((n) => [n, v[n]])), p, k,
    Object.fromEntries(S.WIDTHS.map((n) => [n, v[n] ?? 0])), SEARCH.switches, {
      c_A: o.attention === "eager" ? 1 : 0.5, u_E: o.attention === "eager" ? 1 : 0, eta: 1,  // --efficiency peak
      Phi: rate[precision], Phi_A: rate.bf16, W_M: rate.hbm_bandwidth });
  const named = Object.fromEntries(Object.entries(m.named).map(([k, x]) => [k, Number(x)]));
  const dispatcher = o.schedule === "dualpipe" ? "deepep" : "alltoall";  // evaluate.dispatcher_of
  const L = DATA.options.layout, coefMemo = new Map();
  const device = (lay) => {  // {P_n, P_m}: [coefficient of each composition count]
    const key = `${lay.tp}|${lay.ep}|${lay.etp}`;
    if (!coefMemo.has(key)) {
      const out = { P_n: [], P_m: [] };
      for (const c of SEARCH.composition) {
        const v = Object.assign({}, e, { DP: Q.n(L.dp), TP: Q.n(lay.tp), PP: Q.n(L.pp), EP: Q.n(lay.ep), ETP: Q.n(lay.etp), CP: Q.n(L.cp), SP: Q.n(lay.tp) });
        for (const n of SEARCH.composition) v[n] = Q.n(n === c ? 1 : 0);
        out.P_n.push(Q.float(params.P_n(v)));
        out.P_m.push(Q.float(params.P_m(v)));
      }
      coefMemo.set(key, out);
    }
    return coefMemo.get(key);
  };
  const f = TIME_PY[o.schedule === "dualpipe" ? "_step_megatron_dualpipe" : "_step_megatron"];
  const fn = (v) => f(...TIME_PY.INPUTS.map((k) => v[k]));
  const parts = TIME_PY.PARTS, at = Object.fromEntries(parts.map((p, i) => [p, i]));
  return { base, k, rate, named, groupsKept: S.groups_kept(named), dispatcher, device, fn, parts, at, vpp: o.vpp || 2 };
}
/** One configuration's step (timing.add_time): every part at each distinct stage composition of its pipeline, the
    slowest stage's, and the tokens it trains per second per GPU. */
function timeRow(ctx, tc, row) {
  const o = ctx.o, lay = row.lay, mm = row.m === null ? 1 : row.m, S = STEPTIME;
  const v = Object.assign({}, tc.base, { TP: lay.tp, CP: lay.cp, PP: lay.pp, EP: lay.ep, ETP: lay.etp, DP: lay.dp, b: row.b, s: row.s,
    z: row.c.z, n_mb: mm, rho_full: row.c.r === "full" ? 1 : 0, rho_sel: row.c.r === "selective" ? 1 : 0 },
  PLACEMENT.schedule_coefficients(o.schedule, lay.pp, tc.vpp),
  PLACEMENT.bandwidths(lay.tp, lay.cp, lay.dp, lay.pp, o.perNode, tc.rate.nvlink, tc.rate.network));
  v.tau_EP = PLACEMENT.dispatch_seconds(lay.ep, lay.etp, o.perNode, tc.rate.nvlink, tc.rate.network, tc.base.N_r,
    tc.groupsKept, tc.dispatcher);
  const coef = tc.device(lay);
  let best = null;
  for (const st of ctx.stageTable(lay.pp).distinct) {
    SEARCH.composition.forEach((n, i) => { v[n] = st.vec[i]; });
    let Pn = 0, Pm = 0;
    st.vec.forEach((x, i) => { Pn += x * coef.P_n[i]; Pm += x * coef.P_m[i]; });
    v.P_n = Pn; v.P_m = Pm;
    Object.assign(v, S.stage_inputs(v.L_d, v.L_m, false, tc.k));  // no custom recomputation in the search
    if (tc.base["params.indexer"])  // DeepSeek Sparse Attention (evaluate.inputs: a model with lightning indexers)
      Object.assign(v, S.dsa_attention(row.s, v.L_d, v.L_m, v.L_I, tc.base.P_A, tc.base["params.indexer"], tc.named));
    const out = tc.fn(v);
    if (o.schedule === null) {  // one micro-batch's period: the per-step traffic (but ZeRO-3's) and update not counted
      const dp = v.z === 3 ? out[tc.at.DP] : 0;
      out[tc.at.DP] = dp; out[tc.at.optimizer] = 0; out[tc.at.step] = out[tc.at.microbatch] + dp;
    }
    if (best === null || out[tc.at.step] > best[tc.at.step]) best = out;
  }
  const gpus = lay.dp * lay.tp * lay.pp * lay.cp, tokens = lay.dp * mm * row.b * row.s, step = best[tc.at.step];
  row.time = best;
  row.tps = tokens / ((step > 0 ? step : Infinity) * gpus);
}

// ----------------------------------------------------------------------------- the ranking (ranking.py, sort 'time')
/** The keys of sort 'time': the most tokens per second per GPU (to a thousandth), the most headroom (to the byte),
    then TP, ZeRO, recomputation, PP, CP, EP, ETP, b, s ascending. */
const rankKeys = (r) => [-roundTo(r.tps, 3), -rint(r.headroom), r.lay.tp, r.c.z, r.c.ri, r.lay.pp, r.lay.cp, r.lay.ep, r.lay.etp, r.b, r.s];
function compareKeys(a, b) {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

// ----------------------------------------------------------------------------- the whole search
/** The search as a generator (it yields between layouts: the page stays responsive); its result at the end. */
function* runSearch(m, o) {
  const started = performance.now();
  const ctx = searchContext(m, o);
  if (o.exact) {  // exact.py choices: those the options accept (validate_training), the first refusal when none
    ctx.exact = ctx.choices.filter((c) => {
      try {
        validate_training(withChoice(o.training, c));
        return true;
      } catch (e) {
        if (e instanceof ConfigError) return false;
        throw e;
      }
    });
    if (!ctx.exact.length) validate_training(withChoice(o.training, ctx.choices[0]));
  }
  const en = enumerateLayouts(m, o);
  const rows = [], invalid = {};
  yield* searchRows(ctx, en.layouts, rows, invalid);
  const [fFrag, mBuf] = SEARCH.ends[SEARCH.overheads].map((x) => Q.float(Q.parse(x)));
  const hbm = SEARCH.gpus[o.gpu].capacity;
  const fitting = [];
  for (const r of rows) {
    r.peak = SEARCH_FNS.peak(r.total, fFrag, mBuf);
    if (r.peak > hbm) continue;
    const fw = o.framework;  // search.py _framework: a ZeRO stage the framework does not run at its PP, not listed
    if (fw && !(r.lay.pp > 1 ? fw.zero_pp : fw.zero).includes(r.c.z)) {
      const rule = `fitting, but not run by ${fw.name}`;
      invalid[rule] = (invalid[rule] || 0) + 1;
      continue;
    }
    r.headroom = hbm - r.peak;
    fitting.push(r);
  }
  yield;
  const tc = timeContext(ctx);
  const best = new Map();
  for (let i = 0; i < fitting.length; i++) {
    const r = fitting[i];
    timeRow(ctx, tc, r);
    r.keys = rankKeys(r);
    const id = `${r.lay.dp}|${r.lay.tp}|${r.lay.pp}|${r.lay.ep}|${r.lay.etp}|${r.lay.cp}`;
    const was = best.get(id);
    if (was === undefined || compareKeys(r.keys, was.keys) < 0) best.set(id, r);
    if (i % 2048 === 2047) yield;
  }
  const ranked = [...best.values()].sort((a, b) => compareKeys(a.keys, b.keys));
  return { rows: ranked, counts: { candidates: en.candidates, valid: en.layouts.length, rejected: en.rejected, considered: rows.length,
    fitting: fitting.length, invalid }, schedule: o.schedule, hbm, ms: performance.now() - started };
}
/** A row as memsym search --json writes it (rows.py): the layout, the choice, the bytes and the time. */
function rowObject(r) {
  const out = { dp: r.lay.dp, tp: r.lay.tp, pp: r.lay.pp, ep: r.lay.ep, etp: r.lay.etp, cp: r.lay.cp, sp: r.lay.tp,
    edp: r.lay.dp * r.lay.tp * r.lay.cp / (r.lay.ep * r.lay.etp), mbs: r.b, seq: r.s, zero: r.c.z, recompute: r.c.r, stage: r.stage };
  for (const [c, x] of Object.entries(r.parts)) out[c] = Math.round(x);
  Object.assign(out, { total: Math.round(r.total), peak: Math.round(r.peak), headroom: Math.round(r.headroom) });
  if (r.m !== null) out.microbatches = r.m;
  const parts = TIME_PY.PARTS;
  out.step_time = r.time[parts.indexOf("step")];
  out.tokens_per_gpu_s = roundTo(r.tps, 1);
  for (const p of parts) if (p !== "step") out[`time_${p}`] = r.time[parts.indexOf(p)];
  return out;
}

// ----------------------------------------------------------------------------- the panel
/** What the panel shows (and the tests read): {command, status: idle | searching | done | refused, rows, counts, ms}. */
const SEARCH_STATE = { command: null, status: "idle", rows: [], counts: null, ms: null, token: 0 };
window.memsymSearch = SEARCH_STATE;

const gib = (x) => fmtNum(x / DATA.options.gib, 1);
function searchHTML(note) {
  const S = SEARCH_STATE;
  let html = `<h2>Layout search <small>(the layouts memsym search ranks, computed in this page)</small></h2>`;
  if (S.command) html += `<p class="search-command"><code>${esc(S.command)}</code></p>`;
  if (note) return html + `<p class="search-note">${note}</p>`;
  const c = S.counts;
  const rejected = Object.entries(c.rejected).sort().map(([k, n]) => `${fmtNum(n, 0)} ${esc(k)}`).join(", ");
  const invalid = Object.entries(c.invalid).filter(([, n]) => n).map(([k, n]) => `${fmtNum(n, 0)} ${esc(k)}`).join(", ");
  html += `<p class="search-note">${fmtNum(c.valid, 0)} valid layouts of ${fmtNum(c.candidates, 0)} candidates` +
    (rejected ? ` (rejected: ${rejected})` : "") + `; ${fmtNum(c.considered, 0)} configurations considered` +
    (invalid ? ` (invalid: ${invalid})` : "") + `, ${fmtNum(c.fitting, 0)} fit. ` +
    `Each layout's best configuration (ZeRO stage, recomputation, micro-batch b), the most tokens per second per GPU first ` +
    `under the step-time model at the GPU's peak rates (<code>--efficiency peak</code>: an upper bound on speed; memsym search's default reads each kernel's published rate); ${S.schedule ? `each device at its peak under ${esc(S.schedule)}` : "one micro-batch per stage (the paper's view: give the global batch for a schedule)"}. ` +
    `The search reads the model, the GPU, the GPU count, the global batch, the sequence length, the schedule, the ` +
    `conventions preset, offloading, the linear recipe and the virtual layers above; it chooses the layout, ZeRO stage, ` +
    `recomputation and b itself (as memsym search does). ` +
    `Searched in ${fmtNum(S.ms / 1000, 1)} s.</p>`;
  if (!S.rows.length) return html + `<p class="search-note">No configuration fits.</p>`;
  html += `<table id="search-rows"><thead><tr><th>#</th><th>layout</th><th>training</th><th>tokens/s per GPU</th><th>step</th><th>peak</th><th></th></tr></thead><tbody>`;
  S.rows.slice(0, SEARCH_ROWS).forEach((r, i) => {
    const parts = TIME_PY.PARTS.filter((p) => !["step", "microbatch"].includes(p) && r[`time_${p}`] > 0)
      .map((p) => `${p} ${fmtNum(r[`time_${p}`], 2)} s`).join(", ");
    html += `<tr data-rank="${i + 1}"><td class="num">${i + 1}</td>` +
      `<td>DP&nbsp;${r.dp} · TP&nbsp;${r.tp} · PP&nbsp;${r.pp} · EP&nbsp;${r.ep} · ETP&nbsp;${r.etp} · CP&nbsp;${r.cp}</td>` +
      `<td>ZeRO-${r.zero} · ${esc(r.recompute)} · b&nbsp;${r.mbs}${r.microbatches !== undefined ? ` · m&nbsp;${r.microbatches}` : ""}</td>` +
      `<td class="num">${fmtNum(r.tokens_per_gpu_s, 1)}</td>` +
      `<td class="num" title="${esc(parts)}">${fmtNum(r.step_time, 2)} s</td>` +
      `<td class="num" title="headroom ${gib(r.headroom)} GiB">${gib(r.peak)} GiB</td>` +
      `<td><button type="button" class="search-use" data-rank="${i}" title="show this configuration's estimate above">show</button></td></tr>`;
  });
  return html + "</tbody></table>";
}
function showSearch(note) {
  const el = $("search");
  el.innerHTML = searchHTML(note);
  el.dataset.status = SEARCH_STATE.status;
}
/** A row's configuration into the controls (the layout, ZeRO, recomputation, b; DP from the GPU count). */
function useSearchRow(i) {
  const r = SEARCH_STATE.rows[i];
  if (!r) return;
  for (const k of ["tp", "pp", "ep", "etp", "cp"]) $(`opt-${k}`).value = String(r[k]);
  $("opt-dp").value = "";
  $("opt-zero").value = String(r.zero);
  $("opt-recompute").value = r.recompute;
  $("opt-mbs").value = String(r.mbs);
  lastEdited = null;
  hashProblems = [];
  update();
  writeHash();
}

/** Called after every update (ui.js) with the state; runs the search when the GPU count is set, after the
    estimate is shown and in slices (the page stays responsive), once per command line. */
function renderSearch(state) {
  const S = SEARCH_STATE;
  const stop = (fields, note) => {  // no search runs (a running one is dropped): the panel says why
    S.token++;
    Object.assign(S, { rows: [], counts: null }, fields);
    showSearch(note);
  };
  let req = null;
  if (state.error && state.typed) {  // the estimate refused (its layout, say): the search reads none of its layout fields
    try {
      state = Object.assign({}, state, { model: modelOf(resolve(state.typed)) });
    } catch (e) {
      state = Object.assign({}, state, { typed: null });
    }
  }
  try {
    if (state.typed) req = searchRequest(state);
  } catch (e) {
    return stop({ status: "refused" }, `memsym search refuses this: ${esc(e.message)}`);
  }
  if (req === null || req.skip === "gpus")  // an input the search reads refused: every number cleared; no GPU count: nothing to search
    return stop({ command: null, status: "idle" }, req === null ? "No layouts are ranked while an input the search reads is refused." :
      "Give the number of GPUs (<code>--gpus</code>) to rank the layouts as <code>memsym search</code> does: every valid layout, ZeRO stage, recomputation and micro-batch size, by estimated tokens per second per GPU.");
  if (req.skip) return stop({ command: req.command, status: "refused" }, esc(req.why));
  if (S.command === req.command && S.status !== "refused") {  // the same search: shown, or on its way
    if (!$("search").innerHTML) showSearch(S.status === "searching" ? "searching…" : undefined);
    return;
  }
  const token = ++S.token;
  Object.assign(S, { command: req.command, status: "searching", rows: [], counts: null });
  showSearch("searching…");
  const gen = runSearch(state.model, req.options);
  const step = () => {
    if (token !== S.token) return;  // another search replaced this one
    const until = performance.now() + 40;
    try {
      for (;;) {
        const got = gen.next();
        if (got.done) {
          const res = got.value;
          Object.assign(S, { status: "done", rows: res.rows.slice(0, 100).map(rowObject), counts: res.counts,
            schedule: res.schedule, ms: res.ms });
          showSearch();
          return;
        }
        if (performance.now() > until) break;
      }
    } catch (e) {
      S.status = "refused"; S.rows = [];
      showSearch(`internal error of the page's search (please report it): ${esc(e && e.message)}`);
      console.error(e);
      return;
    }
    setTimeout(step, 0);
  };
  setTimeout(step, 0);
}

document.addEventListener("DOMContentLoaded", () => {
  $("search").addEventListener("click", (ev) => {
    const b = ev.target.closest && ev.target.closest("button.search-use");
    if (b) useSearchRow(Number(b.dataset.rank));
  });
});
