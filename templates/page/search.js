"use strict";
/* The layout search panel: `memsym search`'s rows and order, in floats as it computes, over printed functions
   (SEARCH_PY, DERIVED_PY, TIME_PY, SEARCH_FNS: memsym/page/search.py); the logic mirrors the Python each names. */

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
  const argv = ["memsym", "search"];
  if (model !== null) argv.push("--model", model === "config" ? "config.json" : model);
  argv.push("--gpus", String(o.gpus), "--gpu", o.gpu, "--efficiency", "peak");  // the page has no efficiency tables
  for (const d of ["global_batch", "seq", "schedule", "microbatches", "vpp", "attention"])  // each positive or a name
    if (t[d]) argv.push(`--${d.replace(/_/g, "-")}`, String(t[d]));
  const command = argv.map(shellWord).join(" ");
  if (m.family !== "deepseek")
    return { skip: "family", command, why: `memsym search runs the DeepSeek family's generated kernels; ${m.name} is ${familyOf(m).title}` };
  // the command line's checks (search.py, evaluation.configurations and pipeline, enumeration.enumerate_layouts)
  if (o.gpus > SEARCH.max_gpus)
    throw new ConfigError(`--gpus must be at most 2^20 = ${SEARCH.max_gpus.toLocaleString("en-US")} (the search's ceiling), got ${o.gpus}`, ["gpus"]);
  if (o.globalBatch !== null && o.microbatches !== null)
    throw new ConfigError("give --global-batch (sequences per step: m = global / (DP mbs)) or --microbatches, not both", ["global_batch", "microbatches"]);
  if (o.globalBatch !== null) o.schedule = o.schedule || "1f1b";
  if (!(o.attention in SEARCH.choices)) throw new ConfigError(`search: no generated kernels for attention '${o.attention}' (eager or flash)`, ["attention"]);
  return { command, options: o };
}

// ----------------------------------------------------------------------------- the layouts (enumeration.py)
/** The valid layouts of ``o.gpus`` GPUs in the lattice's order (TP, PP, CP, EP, ETP ascending) and the candidates
    each rule rejected first (enumeration.lattice, _rejection_codes: validate_layout's rules in its order). */
function enumerateLayouts(m, o) {
  const fam = familyOf(m), named = m.named, D = divisorsOf(o.gpus);
  const axis = (a) => {  // _axis_divisors: the divisors of every dimension the family's rules split by the axis
    const sizes = fam.divides.filter((d) => d[2] === a && d[1]).map((d) => Number(named[d[1]]));
    return sizes.length ? divisorsOf(sizes.reduce(gcdInt)) : [1];
  };
  const E = axis("ep"), F = axis("etp"), out = [], rejected = {};
  let candidates = 0;
  const rules = (lay) => {
    if (o.perNode % lay.tp !== 0 || o.perNode % lay.etp !== 0) return "tp-inside-node";
    for (const [rule, symbol, ax] of fam.divides) {
      if (symbol === null) { if ((lay.dp * lay.tp * lay.cp) % (lay.ep * lay.etp) !== 0) return rule; }
      else if (Number(named[symbol]) % lay[ax] !== 0) return rule;
    }
    if (lay.pp > m.l) return "pp-layers";
    for (const s of o.seqs) {
      if (s % lay.cp !== 0) return "cp-divides-seq";
      if (s % (lay.tp * lay.cp) !== 0) return "sp-divides-seq";
    }
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

// ----------------------------------------------------------------------------- the kernels and the stages
/** A stage composition as the kernels read it ({L_d, L_m, e_E, e_H, L_I}: StageComposition.vector). */
function compositionVector(c) {
  return SEARCH.composition.map((n) => (n === "L_d" ? c.dense : n === "L_m" ? c.moe : n === "e_E" ? (c.embedding ? 1 : 0)
    : n === "e_H" ? (c.head ? 1 : 0) : c.extra[n]));
}
/** The values the kernels' coefficients and the step time's parameter counts are computed at: the model's, the
    paper's bytes and the extension defaults (config.named(model, None, Training())), exact. */
function searchValues(m) {
  const e = {};
  for (const [k, x] of Object.entries(m.named)) e[k] = Q.n(String(x));
  for (const [k, v] of Object.entries(DATA.options.extension_defaults)) e[k] = Q.parse(v);
  for (const [k, v] of Object.entries(DATA.options.paper_bytes)) e[k] = Q.parse(v);
  e.F = Q.parse(DATA.options.training.imbalance);
  return e;
}
/** The search's context: the kernels of the model's structure (the generated ``kernel(flags, attention)``) with
    their coefficients (exact, then floats: kernels.coefficients), the distinct stages per PP
    (evaluation._stage_table), the choices. */
function searchContext(m, o) {
  const flags = Object.fromEntries(familyOf(m).flags.map((f, i) => [f, m.structure[i]]));
  const [rows, groups] = SEARCH_PY.kernel(flags, o.attention), e = DERIVED_PY.derived(searchValues(m));
  const coef = {};
  for (const [g, [, f]] of Object.entries(groups)) coef[g] = f(e).map(Q.float);
  const choices = [];
  for (const z of o.zeros) o.policies.forEach((r, ri) => { const pick = SEARCH.choices[o.attention][`${z}|${r}`]; if (pick) choices.push({ z, r, ri, pick }); });
  const comps = Object.keys(choices[0].pick);
  const stageMemo = new Map();
  const stageTable = (pp) => {  // distinct_stages(model, Layout(pp=pp)): the first stage of each composition
    if (!stageMemo.has(pp)) {
      const seen = new Set(), out = [], all = stages(m, { pp, layers_per_stage: null });
      for (const st of all) {
        const key = compKey(st);
        if (!seen.has(key)) { seen.add(key); out.push({ vec: compositionVector(st), index: st.index }); }
      }
      stageMemo.set(pp, { distinct: out, all });
    }
    return stageMemo.get(pp);
  };
  // kernels.step_keys: each recomputing policy's activation term and its two moments (a MoE layer, a dense one)
  const step = {};
  for (const c of choices) if (c.r === "full" || c.r === "selective")
    step[c.pick.activations] = [`step.paper.moe_layer.${c.r}`, `step.paper.dense_layer.${c.r}`];
  // kernels.values: every row of the module's ROWS, 0 where the structure's terms read none
  const at = (g) => {
    const [ids, , f] = groups[g], c = coef[g];
    return (r) => { const v = f(...c, ...SEARCH_PY.ROWS.map((n) => (rows.includes(n) ? r[n] : 0))), out = {}; ids.forEach((id, i) => { out[id] = v[i]; }); return out; };
  };
  return { m, o, choices, comps, stageTable, step, states: at("states"), activations: at("activations"), moments: at("step") };
}
/** The row symbols of a layout, b, s and a composition (the kernels' ROWS), SP = TP. */
function rowValues(lay, s, b, vec) {
  const r = { DP: lay.dp, TP: lay.tp, PP: lay.pp, EP: lay.ep, ETP: lay.etp, CP: lay.cp, SP: lay.tp, b, s };
  SEARCH.composition.forEach((n, i) => { r[n] = vec[i]; });
  return r;
}
/** kernels.add_step: each recomputing policy's largest moment at a composition (a MoE layer rebuilt when it
    has one, a dense layer likewise; never below 0). */
function searchStepExcess(ctx, moments, vec) {
  const out = {};
  for (const [act, [moe, dense]] of Object.entries(ctx.step))
    out[act] = Math.max(Math.max(vec[1] > 0 ? moments[moe] : 0, vec[0] > 0 ? moments[dense] : 0), 0);
  return out;
}
/** ``acts`` plus each recomputing policy's largest step excess over the compositions ``held`` (the stages the device
    runs: one micro-batch's rebuilt layer on any of them). */
function withStep(ctx, lay, s, b, acts, held) {
  if (!Object.keys(ctx.step).length) return acts;
  let x = null;
  for (const v of held) {
    const got = searchStepExcess(ctx, ctx.moments(rowValues(lay, s, b, v)), v);
    if (x === null) x = got;
    else for (const id of Object.keys(x)) x[id] = Math.max(x[id], got[id]);
  }
  for (const [id, v] of Object.entries(x)) acts[id] = acts[id] + v;
  return acts;
}
/** The sum of the components (weights, gradients, optimizer, activations) in their order, as Python's sum. */
function choiceTotal(ctx, pick, states, acts) {
  let t = 0;
  for (const c of ctx.comps) t += (c === "activations" ? acts : states)[pick[c]];
  return t;
}
/** Each choice's row ({c, stage, total, states, acts} and ``row``) at its device of the largest total (the first). */
function pushChoices(ctx, devices, row, rows) {
  for (const c of ctx.choices) {
    let best = -Infinity, at = 0;
    devices.forEach((d, j) => { const t = choiceTotal(ctx, c.pick, d.states, d.acts); if (t > best) { best = t; at = j; } });
    rows.push(Object.assign({ c, stage: devices[at].stage, total: best, states: devices[at].states, acts: devices[at].acts }, row));
  }
}

// ----------------------------------------------------------------------------- the paper's view (evaluation.py)
/** Every configuration at its most-loaded stage, one micro-batch per stage (evaluation._stage_view): rows
    {lay, s, b, choice, at (the composition), total, parts}. */
function* paperView(ctx, layouts, rows) {
  const o = ctx.o;
  for (const lay of layouts) {
    const table = ctx.stageTable(lay.pp).distinct;
    const states = table.map((st) => ctx.states(rowValues(lay, o.seqs[0], o.mbs[0], st.vec)));
    for (const s of o.seqs) for (const b of o.mbs) {
      const devices = table.map((st, k) => ({ stage: st.index, states: states[k],
        acts: withStep(ctx, lay, s, b, ctx.activations(rowValues(lay, s, b, st.vec)), [st.vec]) }));
      pushChoices(ctx, devices, { lay, s, b, m: null }, rows);
    }
    yield;
  }
}

// ----------------------------------------------------------------------------- under a schedule (scheduled.py)
/** scheduled.slots: per device of a PP-stage pipeline, the held stages' summed composition (model states), the
    in-flight-weighted one (activations, exact then floats) and the compositions of the stages it holds (the step). */
function slotsOf(ctx, pp, mm) {
  const key = `${pp}|${mm}`;
  ctx.slots = ctx.slots || new Map();
  if (!ctx.slots.has(key)) {
    const o = ctx.o, all = ctx.stageTable(pp).all, vec = all.map(compositionVector), out = [];
    for (let i = 0; i < pp; i++) {
      const held = heldStages(o.schedule, pp, i);
      const state = SEARCH.composition.map((_, k) => held.reduce((a, j) => a + vec[j][k], 0));
      const ch = chunks(o.schedule, pp, i, mm < 0 ? null : mm, o.vpp);
      const act = SEARCH.composition.map((_, k) => Q.float(ch.reduce((a, c) => Q.add(a, Q.mul(c.inflight,
        compositionVector(partComposition(all[c.stage], c.part))[k])), Q.n(0))));
      out.push({ state, act, held: held.map((j) => vec[j]) });
    }
    ctx.slots.set(key, out);
  }
  return ctx.slots.get(key);
}
/** Every device of every configuration at its peak under the schedule; the configurations whose m = G / (DP b) is
    not an integer, or that DualPipe refuses, counted (scheduled.run). */
function* scheduledView(ctx, layouts, rows, invalid) {
  const o = ctx.o;
  for (const lay of layouts) {
    for (const s of o.seqs) for (const b of o.mbs) {
      let mm;
      if (o.globalBatch !== null) {
        if (o.globalBatch % (lay.dp * b) !== 0) { invalid["global-batch"] = (invalid["global-batch"] || 0) + 1; continue; }
        mm = o.globalBatch / (lay.dp * b);
      } else mm = o.microbatches === null ? -1 : o.microbatches;
      if (o.schedule === "dualpipe" && (lay.pp % 2 !== 0 || (mm >= 0 && (mm % 2 !== 0 || mm < 2 * lay.pp)))) {
        invalid.dualpipe = (invalid.dualpipe || 0) + 1;
        continue;
      }
      const devices = slotsOf(ctx, lay.pp, mm).map((sl, stage) => ({ stage,
        states: ctx.states(rowValues(lay, s, b, sl.state)),
        acts: withStep(ctx, lay, s, b, ctx.activations(rowValues(lay, s, b, sl.act)), sl.held) }));
      pushChoices(ctx, devices, { lay, s, b, m: mm }, rows);
    }
    yield;
  }
}

// ----------------------------------------------------------------------------- the step time (steptime/evaluate.py)
/** placement.bandwidths: a group inside a node sends at NVLink's bandwidth, across nodes at the network's. */
function bandwidths(lay, perNode, nvlink, network) {
  const ring = (extent) => (extent <= perNode ? nvlink : network);
  return { beta_TP: ring(lay.tp), beta_CP: ring(lay.tp * lay.cp), beta_DP: ring(lay.tp * lay.cp * lay.dp),
    beta_EDP: ring(lay.tp * lay.cp * lay.dp), beta_PP: ring(lay.tp * lay.cp * lay.dp * lay.pp) };
}
/** placement.dispatch_seconds: tau_EP, seconds of the experts' dispatch per byte of a token's hidden state. */
function dispatchSeconds(lay, perNode, nvlink, network, topK, groupsKept, dispatcher) {
  const n = lay.ep * lay.etp, q = Math.min(n, perNode), copies = topK * lay.etp;
  let net, nvl;
  if (dispatcher === "alltoall") { net = copies * (n - q) / n; nvl = copies * (q - 1) / n; }
  else { const nodes = n / q, k = Math.min(Math.min(copies, groupsKept), nodes); net = k * (nodes - 1) / nodes; nvl = copies * (q - 1) / q; }
  return Math.max(net / network, nvl / nvlink);
}
/** placement.schedule_coefficients: the bubble's micro-batch periods, backwards and weight-backwards. */
function scheduleCoefficients(schedule, pp, vpp) {
  if (schedule === null) return { chi_mb: 0, chi_B: 0, chi_W: 0 };
  if (schedule === "1f1b") return { chi_mb: pp - 1, chi_B: 0, chi_W: 0 };
  if (schedule === "interleaved") return { chi_mb: (pp - 1) / vpp, chi_B: 0, chi_W: 0 };
  if (schedule === "zb") return { chi_mb: pp - 1, chi_B: 0, chi_W: 2 * (pp - 1) };
  const half = Math.max(pp / 2 - 1, 0);
  return { chi_mb: half, chi_B: half, chi_W: 3 * half };
}
/** The step time's inputs shared by every row (evaluate._model_constants, the GPU's rates) and the per-(tp, ep,
    etp) device parameter coefficients (evaluate._device_coefficients), exact then floats. */
function timeContext(ctx) {
  const m = ctx.m, o = ctx.o, e = searchValues(m), params = SEARCH_FNS.params[structureKey(m)];
  const gpu = SEARCH.gpus[o.gpu] || SEARCH.gpus[SEARCH.default_gpu], rate = gpu.rates;
  const base = {};
  for (const k of ["h", "n_h", "d_h", "d_hr", "d_v", "N_r", "N_s", "F", "B_a", "B_w", "B_g", "B_m", "B_1", "B_2"])
    base[k] = e[k] === undefined ? undefined : Q.float(e[k]);
  for (const k of ["d_cq", "d_c", "h_F", "N", "h_E", "v"]) base[k] = e[k] === undefined ? 0 : Q.float(e[k]);  // 0: absent
  for (const k of ["P_A", "P_F", "P_E", "P_R", "P_H"]) base[k] = Q.float(params[k](e));
  Object.assign(base, { c_A: o.attention === "eager" ? 1 : 0.5, u_E: o.attention === "eager" ? 1 : 0, Phi: rate.bf16, eta: 1,
    W_M: rate.hbm_bandwidth, Phi_A: rate.bf16, B_EP: base.B_a, P_U: 0, Q_C: 0,
    D_M: 0, P_M: 0, o_GR: 1, o_PG: 1, o_EP: 0, o_TP: 0, o_DW: 0 });  // BF16 linears, no custom recomputation, no MTP
  // modules; Megatron's default overlap switches (evaluate.MEGATRON_DEFAULT)
  const n_g = Number(m.named.n_g || 1), k_g = Number(m.named.k_g || 1);
  const groupsKept = n_g && k_g && k_g < n_g ? k_g : Number(m.named.N_r);  // evaluate._groups_kept
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
  return { base, rate, groupsKept, dispatcher, device, fn, parts, at, vpp: o.vpp || 2 };
}
/** One configuration's step (timing.add_time): every part at each distinct stage composition of its pipeline, the
    slowest stage's, and the tokens it trains per second per GPU. */
function timeRow(ctx, tc, row) {
  const o = ctx.o, lay = row.lay, mm = row.m === null ? 1 : row.m;
  const v = Object.assign({}, tc.base, { TP: lay.tp, CP: lay.cp, PP: lay.pp, EP: lay.ep, ETP: lay.etp, DP: lay.dp, b: row.b, s: row.s,
    z: row.c.z, n_mb: mm, rho_full: row.c.r === "full" ? 1 : 0, rho_sel: row.c.r === "selective" ? 1 : 0 },
  scheduleCoefficients(o.schedule, lay.pp, tc.vpp), bandwidths(lay, o.perNode, tc.rate.nvlink, tc.rate.network));
  v.tau_EP = dispatchSeconds(lay, o.perNode, tc.rate.nvlink, tc.rate.network, tc.base.N_r, tc.groupsKept, tc.dispatcher);
  const coef = tc.device(lay);
  let best = null;
  for (const st of ctx.stageTable(lay.pp).distinct) {
    SEARCH.composition.forEach((n, i) => { v[n] = st.vec[i]; });
    let Pn = 0, Pm = 0;
    st.vec.forEach((x, i) => { Pn += x * coef.P_n[i]; Pm += x * coef.P_m[i]; });
    v.P_n = Pn; v.P_m = Pm;
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
  const en = enumerateLayouts(m, o);
  const rows = [], invalid = {};
  const scheduled = o.schedule !== null || o.globalBatch !== null;
  if (scheduled) yield* scheduledView(ctx, en.layouts, rows, invalid);
  else yield* paperView(ctx, en.layouts, rows);
  const [fFrag, mBuf] = SEARCH.ends[SEARCH.overheads].map((x) => Q.float(Q.parse(x)));
  const hbm = SEARCH.gpus[o.gpu].capacity;
  const fitting = [];
  for (const r of rows) {
    r.peak = SEARCH_FNS.peak(r.total, fFrag, mBuf);
    if (r.peak <= hbm) { r.headroom = hbm - r.peak; fitting.push(r); }
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
  for (const c of Object.keys(r.c.pick)) out[c] = Math.round((c === "activations" ? r.acts : r.states)[r.c.pick[c]]);
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
    `The search reads the model, the GPU, the GPU count, the global batch, the sequence length and the schedule above; ` +
    `it chooses the layout, ZeRO stage, recomputation and b itself, with the paper's conventions (as memsym search does). ` +
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
