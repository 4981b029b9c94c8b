"use strict";
/* The page's controls: one per option of `memsym estimate`, empty (not typed) by default, resolved
   as the command line resolves them (commands/common.py: --recipe and --conventions set what was
   not typed; typed options win), then estimate() and the rendering. */

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
const DTYPE_OPTIONS = [["weight_dtype", ["B_w"], "weights"], ["grad_dtype", ["B_g"], "gradients"],
  ["master_dtype", ["B_m"], "the optimizer's master weights"], ["optimizer_dtype", ["B_1", "B_2"], "both Adam moments"],
  ["act_dtype", ["B_a"], "activations"]];
const LAYOUT = ["dp", "tp", "pp", "ep", "etp", "cp"];

/** One control with its label and, below it, where a refusal of it is shown (#err-<id>). */
function field(id, label, control, help) {
  return `<div class="field" id="field-${id}"><label for="${id}"${help ? ` title="${esc(help)}"` : ""}>${esc(label)}</label>${control}` +
    `<div class="field-error" id="err-${id}" hidden></div></div>`;
}
function textInput(id, placeholder) {
  return `<input type="text" id="${id}" name="${id}" inputmode="numeric" autocomplete="off" placeholder="${esc(placeholder)}">`;
}
function select(id, options, dflt) {
  const opts = [[" ", dflt]].concat(options.map((o) => [o, o]));
  return `<select id="${id}" name="${id}">` + opts.map(([v, t]) => `<option value="${esc(v.trim())}">${esc(t)}</option>`).join("") + "</select>";
}
function checkbox(id, label, help) {
  return `<div class="field check" id="field-${id}"><input type="checkbox" id="${id}" name="${id}"><label for="${id}">${esc(label)}</label>${help ? `<small>${esc(help)}</small>` : ""}` +
    `<div class="field-error" id="err-${id}" hidden></div></div>`;
}

function buildForm() {
  const O = DATA.options, T = O.training, L = O.layout;
  let html = "<fieldset><legend>Model</legend>";
  const names = Object.keys(O.presets).concat(Object.keys(DATA.released), Object.keys(DATA.models));
  const paste = DATA.families.deepseek !== undefined && Object.keys(O.presets).length > 0;  // the page reads DeepSeek's fields
  html += field("opt-model", paste ? "--model: preset or pasted config.json" : "--model (as memsym page --model read it)",
    `<select id="opt-model" name="opt-model">` + names.map((n) => `<option value="${esc(n)}">${esc(n)}</option>`).join("") +
    (paste ? `<option value="config">pasted config.json (below)</option>` : "") + "</select>");
  if (paste) html += field("opt-config", "pasted Hugging Face config.json (read as data)",
    `<textarea id="opt-config" name="opt-config" rows="4" spellcheck="false" placeholder='{"model_type": "deepseek_v3", ...}'></textarea>`);
  html += "</fieldset><fieldset><legend>Parallel layout (Table 5)</legend>";
  for (const k of LAYOUT) html += field(`opt-${k}`, `--${k} (${k.toUpperCase()})`, textInput(`opt-${k}`, `default ${L[k]}`));
  html += field("opt-sp", "--sp (SP: TP or 1)", textInput("opt-sp", "default TP"));
  html += field("opt-layers_per_stage", "--layers-per-stage N,N,...", textInput("opt-layers_per_stage", "default: the paper's split"));
  html += field("opt-stage", "--stage (pipeline stage reported)", textInput("opt-stage", "default 1; with a schedule the most-loaded"));
  html += "</fieldset><fieldset><legend>Training (Tables 7 and 9)</legend>";
  html += field("opt-recipe", "--recipe", select("opt-recipe", Object.keys(O.recipes), "(none)"));
  html += field("opt-zero", "--zero (ZeRO stage)", select("opt-zero", Object.keys(O.zero_names).map(String), `default ${T.zero}`));
  html += field("opt-recompute", "--recompute", select("opt-recompute", O.recompute, `default ${T.recompute}`));
  html += `<div class="ops" role="group" aria-label="operators a custom recomputation recomputes">`;
  for (const [op, what] of Object.entries(O.recompute_ops)) html += checkbox(`opt-op-${op}`, `custom: ${op}`, what);
  html += "</div>";
  html += field("opt-attention", "--attention", select("opt-attention", O.attention, `default ${T.attention}`));
  html += field("opt-mbs", "--mbs (micro-batch b)", textInput("opt-mbs", `default ${T.mbs}`));
  html += field("opt-seq", "--seq (sequence s)", textInput("opt-seq", `default ${T.seq}`));
  html += field("opt-imbalance", "--imbalance (F >= 1)", textInput("opt-imbalance", `default ${T.imbalance}`));
  html += "</fieldset><fieldset><legend>Pipeline schedule</legend>";
  html += field("opt-schedule", "--schedule", select("opt-schedule", O.schedules, "(none: one micro-batch)"));
  html += field("opt-microbatches", "--microbatches (m)", textInput("opt-microbatches", "default: enough to fill the pipeline"));
  html += field("opt-vpp", "--vpp (V, interleaved)", textInput("opt-vpp", "default 2"));
  html += "</fieldset><fieldset><legend>Precision (Table 7)</legend>";
  for (const [dest, syms, what] of DTYPE_OPTIONS)
    html += field(`opt-${dest}`, `--${dest.replace("_", "-")} (${syms.join(",")}: ${what})`, select(`opt-${dest}`, Object.keys(O.dtypes), "default"));
  html += checkbox("opt-fp8_activations", "--fp8-activations", "cache the DeepSeek-V3 report's FP8 / E5M6 activations");
  html += "</fieldset><fieldset><legend>Conventions</legend>";
  html += field("opt-conventions", "--conventions (preset)", select("opt-conventions", Object.keys(O.convention_presets), "(none)"));
  for (const [name, s] of Object.entries(O.switches))
    html += field(`opt-${name}`, s.option, select(`opt-${name}`, s.values, `default ${s.values[0]}`), s.help);
  html += field("opt-bytes_per_param", "--bytes-per-param", select("opt-bytes_per_param", Object.keys(O.bytes_conventions), "default paper"));
  html += checkbox("opt-mtp", "--mtp", "count the D MTP layers in Megatron's shard (needs --rank megatron)");
  html += "</fieldset><fieldset><legend>Fit against a GPU</legend>";
  html += field("opt-gpu", "GPU (memory a training job can use)",
    `<select id="opt-gpu" name="opt-gpu">` + DATA.gpus.map((g) => `<option value="${g.id}">${esc(g.name)} (${esc(g.capacity)})</option>`).join("") + "</select>");
  html += "</fieldset>";
  $("controls").innerHTML = html;
  $("opt-gpu").value = "h800";
}

// ----------------------------------------------------------------------------- reading the controls (argparse's types)
/** The typed options, {dest: value}, each read as `memsym estimate --<option>=<text>` reads it
    (inputs.js); an empty field is not typed.  Read in the order of the form: the first refusal is
    the one the command line gives for these options in this order. */
function typedOptions() {
  const t = {};
  const text = (dest) => $(`opt-${dest}`).value;
  const typed = (dest, read) => { const raw = text(dest); if (raw !== "") t[dest] = read(dest, raw); };
  for (const k of LAYOUT) typed(k, positiveInt);
  typed("sp", positiveInt);
  typed("layers_per_stage", intList);
  typed("stage", nonnegInt);
  const zero = text("zero");
  if (zero !== "") t.zero = parseInt(zero, 10);
  const rc = text("recompute");
  if (rc !== "") {
    const ops = Object.keys(DATA.options.recompute_ops).filter((o) => $(`opt-op-${o}`).checked);
    if (rc === "custom" && !ops.length)
      throw argError("recompute", `custom recomputation needs operators, e.g. custom:norm,mla_up; valid: ${Object.keys(DATA.options.recompute_ops).join(", ")}`);
    t.recompute = [rc, rc === "custom" ? ops : []];
  }
  if (text("attention") !== "") t.attention = text("attention");
  typed("mbs", positiveInt);
  typed("seq", positiveInt);
  typed("imbalance", (dest, raw) => Q.str(imbalanceFactor(dest, raw)));
  if (text("schedule") !== "") t.schedule = text("schedule");
  typed("microbatches", positiveInt);
  typed("vpp", positiveInt);
  for (const [dest] of DTYPE_OPTIONS) { const v = text(dest); if (v !== "") t[dest] = DATA.options.dtypes[v]; }
  if ($("opt-fp8_activations").checked) t.fp8_activations = true;
  for (const name of Object.keys(DATA.options.switches)) if (text(name) !== "") t[name] = text(name);
  if (text("bytes_per_param") !== "") t.bytes_per_param = text("bytes_per_param");
  if ($("opt-mtp").checked) t.mtp = true;
  return t;
}
/** common.check_conflicts: a bytes-per-param convention of ZeRO >= z with --zero typed below it. */
function checkConflicts(a, typed) {
  const per = a.bytes_per_param;
  if (per && per !== "paper" && "zero" in typed) {
    const zmin = DATA.options.bytes_conventions[per][1];
    if (zmin && typed.zero < zmin)
      throw new ConfigError(`--bytes-per-param ${per} is a ZeRO >= ${zmin} convention (the optimizer states sharded over the data-parallel ranks); --zero ${typed.zero} contradicts it`,
        ["zero", "bytes_per_param"]);
  }
}

/** The options as the command line resolves them (common.resolve_presets): typed, then --recipe, then --conventions, then defaults. */
function resolve(typed) {
  const O = DATA.options, T = O.training, L = O.layout;
  const a = { model: O.default_model, dp: L.dp, tp: L.tp, pp: L.pp, ep: L.ep, etp: L.etp, cp: L.cp, sp: null,
    layers_per_stage: null, zero: T.zero, recompute: [T.recompute, []], attention: T.attention, mbs: T.mbs, seq: T.seq,
    imbalance: T.imbalance, schedule: null, microbatches: null, vpp: null, fp8_activations: false,
    bytes_per_param: "paper", mtp: false };
  for (const [dest] of DTYPE_OPTIONS) a[dest] = null;
  for (const [name, s] of Object.entries(O.switches)) a[name] = s.values[0];
  const recipe = $("opt-recipe").value, preset = $("opt-conventions").value;
  // common.resolve_presets: typed > recipe > conventions preset > default, whatever the order typed
  if (preset) for (const [dest, v] of Object.entries(O.convention_presets[preset])) if (!(dest in typed)) a[dest] = v;
  if (recipe) for (const [dest, v] of Object.entries(O.recipes[recipe].options)) if (!(dest in typed)) a[dest] = v;
  Object.assign(a, typed);
  return a;
}

/** resolve.resolved's end: a recipe for another family's model refused when a model was chosen, then the model's
    family's layout defaults (EP = ETP = 1 without experts) for what neither was typed nor set by a preset or recipe. */
function familyDefaults(a, m, typed) {
  const O = DATA.options, recipe = $("opt-recipe").value, preset = $("opt-conventions").value;
  const layered = new Set(Object.keys(typed));
  if (preset) for (const k of Object.keys(O.convention_presets[preset])) layered.add(k);
  if (recipe) {
    for (const k of Object.keys(O.recipes[recipe].options)) layered.add(k);
    const own = O.recipes[recipe].family;
    const chosen = $("opt-model").value, typed = Object.keys(DATA.models).length > 0 || chosen !== O.default_model;
    if (own && typed && own[0] !== m.family)  // resolve.resolved: the model as it was given (a path, a preset)
      throw new ConfigError(`--recipe ${recipe} is a recipe for a ${own[1]} model; --model ${chosen === "config" ? "config.json" : chosen} is a ${familyOf(m).title} model`, ["recipe", "model"]);
  }
  for (const [k, v] of Object.entries(familyOf(m).layout_defaults)) if (!layered.has(k)) a[k] = v;
}

/** common.training_from_args */
function trainingOf(a, typed) {
  const O = DATA.options;
  const bytes = {};
  for (const [k, v] of Object.entries(O.paper_bytes)) bytes[k] = Q.parse(v);
  for (const [dest, syms] of DTYPE_OPTIONS) if (a[dest] !== null && a[dest] !== undefined) for (const s of syms) bytes[s] = Q.n(a[dest]);
  let zero = a.zero;
  if (a.bytes_per_param && a.bytes_per_param !== "paper") {
    const [conv, zmin] = O.bytes_conventions[a.bytes_per_param];
    const keep = new Set();
    for (const [dest, syms] of DTYPE_OPTIONS) if (dest in typed) syms.forEach((s) => keep.add(s));
    for (const [k, v] of Object.entries(conv)) if (!keep.has(k)) bytes[k] = Q.n(v);
    if (zmin && !("zero" in typed)) zero = Math.max(zero, zmin);
  }
  const conventions = { mtp: !!a.mtp };
  for (const name of Object.keys(O.switches)) conventions[name] = a[name];
  const [rc, ops] = a.recompute;
  const order = Object.keys(O.recompute_ops);
  return { mbs: a.mbs, seq: a.seq, zero, recompute: rc, recompute_ops: order.filter((o) => ops.includes(o)),
    attention: a.attention, fp8: !!a.fp8_activations, imbalance: Q.parse(a.imbalance), schedule: a.schedule,
    microbatches: a.microbatches, vpp: a.vpp, bytes, conventions };
}

const PRESET_MODELS = {};
function modelOf(a) {
  const choice = $("opt-model").value;
  if (choice === "config")  // read as `memsym estimate --model config.json` reads that file
    return fromDict(readConfigJSON($("opt-config").value, "config.json", ["config"]), "config.json", "config", ["config"]);
  // the preset chosen by default yields to a recipe's model; a model of `memsym page --model` is typed
  const given = Object.keys(DATA.models).length > 0;
  const name = ("model" in a && !given && choice === DATA.options.default_model) ? a.model : choice;
  if (name in DATA.models) return givenModel(DATA.models[name]);
  if (name in DATA.released) return givenModel(DATA.released[name]);  // a released model of any family (paper/models)
  if (!(name in DATA.options.presets))  // a recipe's model on a page of other models
    throw new ConfigError(`--model ${name}: this page offers ${Object.keys(DATA.models).join(", ")} (memsym page --model)`, ["model", "recipe"]);
  if (!(name in PRESET_MODELS)) PRESET_MODELS[name] = fromDict(readConfigJSON(DATA.options.presets[name], name, ["model"]), name, name, ["model"]);
  return PRESET_MODELS[name];
}

// ----------------------------------------------------------------------------- rendering
const COLORS = { weights: "#4e79a7", gradients: "#f28e2b", optimizer: "#59a14f", activations: "#e15759", runtime: "#76b7b2",
  step: "#b07aa1" };
const math = (inner) => `<math display="inline">${inner}</math>`;
function valueCells(key, q) {
  return `<td class="num" id="v-${key}" data-exact="${Q.str(q)}">${fmtInt(q)}</td><td class="num" id="g-${key}">${fmtGiB(q)}</td>`;
}
/** A kind's symbol (M_A, M_E, ...: device_terms.kinds_of) as Table 10 prints it, M^A. */
const kindSymbol = (sym) => `<msup><mi>M</mi><mi>${esc(sym.split("_")[1])}</mi></msup>`;
function actFormula(m, kept, variant) {  // act.stage of the view's variant: the device assembly's expression
  const dev = familyOf(m).device, sym = {};
  for (const [kind, s] of Object.entries(dev.kinds)) sym[kind] = kindSymbol(s);
  const head = DATA.mathml[dev.stage[variant.split(".")[0]]];
  let out = `<div class="formula">${math(head)}</div><details><summary>the tensors kept per layer (this view)</summary>`;
  for (const [kind, list] of Object.entries(kept)) {
    if (kind === "mtp" && !list.length) continue;  // no MTP module trained (--mtp-activations none)
    const body = list.length ? list.map((k) => DATA.mathml[k.fn]).join("<mo>+</mo>") : "<mn>0</mn>";
    out += `<div class="formula">${math(`${sym[kind]}<mo>=</mo>${body}`)}</div>`;
  }
  return out + "</details>";
}
function render(m, t, est, gpu) {
  const b = est.bytes, st = est.stage;
  // explain.stage_content: the family's CSA and HCA layers named beside the MoE count ("11 MoE (4 CSA, 7 HCA)")
  const fam = familyOf(m);
  const own = fam.counts.filter(([, f]) => fam.named_counts.includes(f)).map(([sym, f]) => [st.extra[sym] || 0, f])
    .filter(([n]) => n).map(([n, f]) => `${n} ${f}`).join(", ");
  const moe = st.moe ? `${st.moe} MoE` + (own ? ` (${own})` : "") : "";
  const stName = `stage ${st.index} (layers ${st.layers[0]}-${st.layers[1] - 1}: ${[st.embedding ? "embedding" : "", st.dense ? `${st.dense} dense` : "", moe, st.head ? "head" : ""].filter(Boolean).join(", ")})`;
  let html = `<p id="summary">${esc(m.name)}, one device of <span id="v-stage" data-index="${st.index}">${esc(stName)}</span>; ZeRO ${t.zero} (${DATA.options.zero_names[t.zero]}), recompute ${esc(t.recompute === "custom" ? "custom:" + t.recompute_ops.join(",") : t.recompute)}, b=${t.mbs}, s=${t.seq}` +
    (t.schedule ? `; schedule ${esc(t.schedule)}, <span id="v-inflight">${fmtInt(est.inflight)}</span> micro-batches in flight` : "") + "</p>";
  html += `<table id="params"><caption>Parameters on the device (Table 6)</caption><thead><tr><th scope="col">quantity</th><th scope="col">formula</th><th scope="col">params</th><th scope="col">billions</th></tr></thead><tbody>`;
  const side = familyOf(m).states[structureKey(m)][`${t.conventions.rank}/${t.conventions.shared_expert}`];
  for (const [k, label, fn] of [["non_moe", "non-MoE P_n", side.P_n], ["moe", "MoE P_m", side.P_m], ["total", "total", null]]) {
    const q = est.params[k];
    html += `<tr><th scope="row">${label}</th><td class="formula">${fn === null ? math("<msub><mi>P</mi><mi>n</mi></msub><mo>+</mo><msub><mi>P</mi><mi>m</mi></msub>") : `<details><summary>formula</summary><div class="scroll">${math(DATA.mathml[fn])}</div></details>`}</td>` +
      `<td class="num" id="v-params-${k}" data-exact="${Q.str(q)}">${fmtInt(q)}</td><td class="num">${(Q.float(q) / 1e9).toFixed(3)}</td></tr>`;
  }
  html += "</tbody></table>";
  html += `<table id="bytes"><caption>Bytes on the device (Tables 8 and 10)</caption><thead><tr><th scope="col">component</th><th scope="col">term</th><th scope="col">formula</th><th scope="col">bytes</th><th scope="col">GiB</th></tr></thead><tbody>`;
  for (const k of ["weights", "gradients", "optimizer"]) {
    const id = est.ids[k];
    html += `<tr><th scope="row"><span class="swatch" style="background:${COLORS[k]}"></span>${k}</th><td><code>${esc(id)}</code></td><td class="formula"><div class="scroll">${math(DATA.mathml[side.terms[id]])}</div></td>${valueCells("bytes-" + k, b[k])}</tr>`;
  }
  const actId = t.schedule ? "n_fl x act.stage (held at the peak)" : "act.stage (one micro-batch)";
  html += `<tr><th scope="row"><span class="swatch" style="background:${COLORS.activations}"></span>activations</th><td><code>${actId}</code></td><td class="formula"><div class="scroll">${actFormula(m, est.kept, est.variant)}</div></td>${valueCells("bytes-activations", b.activations)}</tr>`;
  if (b.runtime !== undefined) html += `<tr><th scope="row"><span class="swatch" style="background:${COLORS.runtime}"></span>runtime buffers</th><td><code>${esc(est.ids.runtime)}</code></td><td class="formula">cuBLAS workspaces (derivations/assembly/runtime.py)</td>${valueCells("bytes-runtime", b.runtime)}</tr>`;
  // the step's peak (memsym estimate's text): shown when one micro-batch's backward holds more than the end of its forward
  const stepped = Q.cmp(b.step, Q.n(0)) > 0;
  html += `<tr class="total"><th scope="row">total</th><td>${stepped ? "<small>at the end of the forward</small>" : ""}</td><td class="formula"><div class="scroll">${math("<mi>weights</mi><mo>+</mo><mi>gradients</mi><mo>+</mo><mi>optimizer</mi><mo>+</mo><mi>activations</mi>" + (b.runtime !== undefined ? "<mo>+</mo><mi>runtime</mi>" : ""))}</div></td>${valueCells("bytes-total", b.total)}</tr>`;
  if (stepped) {
    const cast = Q.cmp(est.step.cast, Q.n(0)) !== 0 ? `<p class="note">less the head's cross-entropy backward transient (--ce-backward cast), which the moments replace: <span class="num">${fmtInt(est.step.cast)}</span> bytes</p>` : "";
    html += `<tr class="step"><th scope="row"><span class="swatch" style="background:${COLORS.step}"></span>+ one backward</th><td><code>${esc(est.ids.step)}</code></td>` +
      `<td class="formula"><details><summary>formula</summary><div class="scroll">${math(DATA.mathml[est.step.fn])}</div>${cast}</details></td>${valueCells("bytes-step", b.step)}</tr>`;
    html += `<tr class="total step-total"><th scope="row">total at the step peak</th><td><small>what the verdict judges</small></td><td class="formula"><div class="scroll">${math("<mi>total</mi><mo>+</mo><mi>one backward</mi>")}</div></td>${valueCells("bytes-step_total", b.step_total)}</tr>`;
  }
  if (t.schedule) html += `<tr><th scope="row">one micro-batch, act.</th><td><code>act.stage</code></td><td></td>${valueCells("bytes-activations_per_microbatch", b.activations_per_microbatch)}</tr>`;
  html += `<tr><th scope="row">${esc(familyOf(m).layer_label)}, act.</th><td><code>act.layer</code></td><td class="formula">${math(DATA.mathml[familyOf(m).device.layer])}</td>${valueCells("bytes-activations_per_layer", b.activations_per_layer)}</tr>`;
  html += "</tbody></table>";
  // the verdict judges the step's peak (analyses/budget.py: the total plus the step excess, with the Sec. 6 overheads)
  const lo = est.overheads.low.step_peak, hi = est.overheads.high.step_peak, hbm = Q.n(gpu.bytes);
  const verdict = Q.cmp(hi, hbm) <= 0 ? "fits" : (Q.cmp(lo, hbm) <= 0 ? "fits only at the low end" : "does not fit");
  const span = (id, q) => `<span id="${id}" data-exact="${Q.str(q)}">${fmtGiB(q)}</span>`;
  const ends = (field, id) => `${span(`v-${id}-low`, est.overheads.low[field])} - ${span(`v-${id}-high`, est.overheads.high[field])} GiB`;
  html += `<p id="verdict" class="${verdict === "fits" ? "ok" : (verdict === "does not fit" ? "bad" : "warn")}">Against one ${esc(gpu.name)} (<span id="v-hbm" data-exact="${gpu.bytes}">${fmtGiB(hbm)}</span> GiB): peak with Sec. 6 overheads ${ends("peak", "peak")}` +
    (stepped ? ` at the end of the forward, ${ends("step_peak", "step-peak")} at the step peak` : "") +
    ` (${pct(lo, hbm)} - ${pct(hi, hbm)}): <strong id="v-verdict">${verdict}</strong>; allocated (no overheads) ${fmtGiB(b.step_total)} GiB${stepped ? " at the step peak" : ""}.</p>`;
  html += bar(b, hbm, hi, est.ids.step);
  $("results").innerHTML = html;
}
/** The components stacked (and one micro-batch's backward at the step's peak, ``stepId`` its moment), the Sec. 6
    overheads to the judged peak ``hi`` and the GPU's capacity. */
function bar(b, hbm, hi, stepId) {
  const W = 760, H = 54, scale = Math.max(Q.float(hi), Q.float(hbm));
  let x = 0, svg = `<svg id="bar" role="img" aria-label="stacked bar of the components against the GPU" width="${W + 20}" height="${H + 40}" viewBox="0 0 ${W + 20} ${H + 40}">`;
  for (const k of ["weights", "gradients", "optimizer", "activations", "runtime", "step"]) {
    if (b[k] === undefined || (k === "step" && !stepId)) continue;
    const w = Q.float(b[k]) / scale * W, label = k === "step" ? "backward" : k;
    svg += `<rect x="${10 + x}" y="10" width="${Math.max(w, 0)}" height="${H - 20}" fill="${COLORS[k]}"><title>${k === "step" ? `one backward (${esc(stepId)})` : k}: ${fmtGiB(b[k])} GiB</title></rect>`;
    const text = `${label} ${fmtGiB(b[k], 1)}`;
    if (w > Math.max(60, 7 * text.length + 8)) svg += `<text x="${10 + x + 4}" y="${H / 2 + 4}" fill="#fff" font-size="12">${text}</text>`;
    x += w;
  }
  const g = Q.float(hbm) / scale * W, p = Q.float(hi) / scale * W;
  svg += `<rect x="${10 + x}" y="14" width="${Math.max(p - x, 0)}" height="${H - 28}" fill="none" stroke="#888" stroke-dasharray="3,2"><title>Sec. 6 overheads (high end)</title></rect>`;
  svg += `<line x1="${10 + g}" y1="2" x2="${10 + g}" y2="${H}" stroke="#000" stroke-width="2"/><text x="${Math.min(10 + g, W - 60)}" y="${H + 14}" font-size="12">GPU ${fmtGiB(hbm, 0)} GiB</text>`;
  return svg + "</svg>";
}

/** The field the user last changed: a refusal that concerns several fields is shown next to it. */
let lastEdited = null;
function showRefusal(message, fields) {
  const err = $("error");
  err.textContent = message; err.hidden = false;
  $("results").innerHTML = "";
  const present = fields.filter((f) => $(`opt-${f}`));
  const primary = present.includes(lastEdited) ? lastEdited : present[0];
  for (const f of present) {
    $(`opt-${f}`).setAttribute("aria-invalid", "true");
    $(`field-opt-${f}`).classList.add("invalid");
  }
  $("error-note").hidden = !primary;
  if (primary) {
    const slot = $(`err-opt-${primary}`);
    slot.textContent = message; slot.hidden = false;
    $(`opt-${primary}`).setAttribute("aria-describedby", `err-opt-${primary}`);
  }
  document.body.dataset.state = "error";
}
function clearRefusals() {
  for (const el of document.querySelectorAll(".field-error")) { el.textContent = ""; el.hidden = true; }
  for (const el of document.querySelectorAll(".field.invalid")) el.classList.remove("invalid");
  for (const el of document.querySelectorAll("[aria-invalid]")) { el.removeAttribute("aria-invalid"); el.removeAttribute("aria-describedby"); }
}
function update() {
  clearRefusals();
  try {
    const typed = typedOptions();
    const a = resolve(typed);
    checkConflicts(a, typed);
    const m = modelOf(a);
    familyDefaults(a, m, typed);
    // the empty fields' defaults: the model's family's (EP = ETP = 1 without experts), else the paper's
    for (const k of LAYOUT) { const f = familyOf(m).layout_defaults[k]; $(`opt-${k}`).placeholder = `default ${f === undefined ? DATA.options.layout[k] : f}`; }
    const lay = { dp: a.dp, tp: a.tp, pp: a.pp, ep: a.ep, etp: a.etp, cp: a.cp, sp: a.sp, layers_per_stage: a.layers_per_stage };
    const t = trainingOf(a, typed);
    const est = estimate(m, lay, t, "stage" in typed ? typed.stage : null);
    const gpu = DATA.gpus.find((g) => g.id === $("opt-gpu").value);
    render(m, t, est, gpu);
    const err = $("error");
    err.textContent = ""; err.hidden = true;
    $("error-note").hidden = true;
    document.body.dataset.state = "ok";
  } catch (e) {
    $("results").innerHTML = "";  // first: whatever follows, no number of an earlier input stays
    document.body.dataset.state = "error";
    if (e instanceof ConfigError) showRefusal(oneLine(e.message), e.fields);
    else {  // a fault of the page itself: said, never a stale number
      showRefusal(`internal error of the page (please report it): ${e && e.name ? e.name + ": " : ""}${e && e.message !== undefined ? e.message : e}`, []);
      console.error(e);
    }
  }
}

function applyRecipeDevice() {
  const r = $("opt-recipe").value;
  if (r && DATA.options.recipes[r].device) {
    const [name, bytes] = DATA.options.recipes[r].device;
    const g = DATA.gpus.find((x) => x.bytes === bytes && x.name.includes(name));
    if (g) $("opt-gpu").value = g.id;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  buildForm();
  const edited = (ev) => { if (ev.target && ev.target.id && ev.target.id.startsWith("opt-")) lastEdited = ev.target.id.slice(4); };
  $("controls").addEventListener("input", (ev) => { edited(ev); update(); });
  $("controls").addEventListener("change", (ev) => {
    edited(ev);
    if (ev.target.id === "opt-recipe") { try { applyRecipeDevice(); } catch (e) { console.error(e); } }
    update();
  });
  update();
});
