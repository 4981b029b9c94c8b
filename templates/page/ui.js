"use strict";
/* The controls (one per option of `memsym estimate`, empty: not typed) resolved as commands/common.py resolves them,
   then estimate() and the rendering. */

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
/** The controls are rendered at generation (memsym/page/form.py, templates/page/form.html.j2); DATA.form says how
    they are read: the --*-dtype options with the byte symbols each sets, the layout's degrees. */
const DTYPE_OPTIONS = DATA.form.dtypes;
const LAYOUT = Object.keys(DATA.options.layout);
/** The GPU the page judges against until another is chosen. */
const PAGE_GPU = "h800";

// ----------------------------------------------------------------------------- reading the controls (argparse's types)
/** A refusal of a typed option, argparse's "argument --dp: ..." */
const argError = (dest, msg) => new ConfigError(`argument --${dest.replace(/_/g, "-")}: ${msg}`, [dest]);
/** How a typed field's text is read, by the argparse type memsym/page/form.py names: memsym/argtypes.py's, printed,
    bounded as its apply_limits bounds the option (by its dest). */
const READERS = {
  positive_int: (dest, raw) => arg_positive_int(raw, limit_option(dest)),
  nonnegative_int: (dest, raw) => arg_nonneg_int(raw, limit_option(dest)),
  int_list: (dest, raw) => int_list(raw, limit_option(dest), DATA.inputs.list_lengths[dest], false),  // not a set
  imbalance: (dest, raw) => imbalance_factor(bounded_text(raw)),
  layer_counts: (dest, raw) => layer_counts(bounded_text(raw)),
  offload_modules: (dest, raw) => parse_offload(bounded_text(raw)),
  recompute: (dest, raw) => parse_recompute(bounded_text(raw)),
  int: (dest, raw) => parseInt(raw, 10), choice: (dest, raw) => raw, dtype: (dest, raw) => DATA.options.dtypes[raw] };
/** The typed options, {dest: value}, each read as `memsym estimate --<option>=<text>` reads it (a refusal as argparse
    says it); an empty field (an unchecked box) is not typed.  Read in DATA.form.read's order: the first refusal is the
    one the command line gives for these options in this order. */
function typedOptions() {
  const t = {};
  for (const [dest, read] of DATA.form.read) {
    const el = $(`opt-${dest}`);
    if (read === "flag") { if (el.checked) t[dest] = true; continue; }
    if (el.value === "") continue;
    const ops = Object.keys(DATA.options.recompute_ops).filter((o) => $(`opt-op-${o}`).checked);
    const raw = read === "recompute" && el.value === "custom" ? `custom:${ops.join(",")}` : el.value;
    try {
      t[dest] = READERS[read](dest, raw);
    } catch (e) { throw e instanceof ConfigError ? argError(dest, e.message) : e; }
  }
  return t;
}
/** Whether --model is typed: another model than the page's default chosen, or any on a page of given models. */
const modelTyped = () => Object.keys(DATA.models).length > 0 || $("opt-model").value !== DATA.options.default_model;
/** The options as `memsym estimate` holds them after argparse (its defaults under the typed values; a pasted
    config.json as its path), resolved as the command line resolves them (resolve.resolved, printed: typed > recipe >
    conventions preset > the view's defaults > defaults): {dest: value}.  ``gpus``: --gpus resolved too (DP = GPUs /
    (TP PP CP), or the command line's refusal); without it, what the search reads the model of a refused estimate
    from (it reads no layout field). */
function resolve(typed, gpus = false) {
  if (!gpus) typed = Object.fromEntries(Object.entries(typed).filter(([k]) => k !== "gpus"));
  const O = DATA.options, T = O.training, chosen = $("opt-model").value;
  const v = Object.assign({ sp: null, layers_per_stage: null, zero: T.zero, recompute: [T.recompute, []],
    attention: T.attention, mbs: T.mbs, seq: T.seq, imbalance: Q.parse(T.imbalance), schedule: null, microbatches: null,
    vpp: null, fp8_activations: false, bytes_per_param: "paper", mtp: false, linear_recipe: null,
    quantized_param_gather: false, offload_activations: null, virtual_layers: null, model: O.default_model,
    recipe: $("opt-recipe").value || null, conventions: $("opt-conventions").value || null, _conventions_preset: true },
  O.layout, Object.fromEntries(DATA.form.dtypes.map(([dest]) => [dest, null])),
  Object.fromEntries(Object.entries(O.switches).map(([name, sw]) => [name, sw.values[0]])));
  if (modelTyped()) v.model = chosen === "config" ? "config.json" : chosen;
  return Object.fromEntries(resolved(Object.assign(v, typed), typedDests(typed)));
}
const typedDests = (typed) => Object.keys(typed).concat(modelTyped() ? ["model"] : []);

function modelOf(a) {
  const choice = $("opt-model").value;
  if (choice === "config") {  // read as `memsym estimate --model config.json` reads that file (from_dict, printed)
    try {
      const data = readConfigJSON($("opt-config").value, "config.json", ["config"]);
      return modelData(from_dict(data, "config.json", "config"));
    } catch (e) { if (e instanceof ConfigError) e.fields = ["config"]; throw e; }
  }
  // the preset chosen by default yields to a recipe's model (resolve.resolved); a model the command line read
  // (memsym/page/data.py model_data): of memsym page --model, released (paper/models) or a preset
  const name = a.model;
  for (const models of [DATA.models, DATA.released, DATA.options.presets]) if (name in models) return models[name];
  // a recipe's model on a page of other models
  const offered = Object.keys(DATA.models).join(", ");
  throw new ConfigError(`--model ${name}: this page offers ${offered} (memsym page --model)`, ["model", "recipe"]);
}

// ----------------------------------------------------------------------------- rendering
const COLORS = { weights: "#4e79a7", gradients: "#f28e2b", optimizer: "#59a14f", activations: "#e15759", runtime: "#76b7b2",
  step: "#b07aa1" };
const SUM = ["+", "-", "\u2212", "="], TIMES = "\u2062";
const isOp = (el, ops) => el.localName === "mo" && ops.includes(el.textContent.trim());
/** ``els`` in runs, a new one at each operator of ``ops``. */
function runs(els, ops) {
  const out = [];
  for (const el of els) { if (!out.length || isOp(el, ops)) out.push([]); out[out.length - 1].push(el); }
  return out;
}
/** One <math> of ``els``; ``infix``: its first operator keeps its infix spacing (alone first in a <math> it would
    read as a prefix sign). */
function piece(els, infix) {
  if (els.length > 1 && infix) els[0].setAttribute("form", "infix");
  return `<math display="inline" class="piece">${els.map((e) => e.outerHTML).join("")}</math>`;
}
/** A formula that wraps: its top-level sum cut into one <math> per term (and a long term into one per factor), so
    that a line breaks between them as text does (MathML Core breaks no line inside a <math>). */
function math(inner) {
  const tpl = document.createElement("template");
  tpl.innerHTML = `<math>${inner}</math>`;
  let node = tpl.content.firstElementChild;
  while (node && node.children.length === 1 && node.firstElementChild.localName === "mrow") node = node.firstElementChild;
  const kids = node ? [...node.children] : [], terms = runs(kids, SUM), sum = (els) => piece(els, isOp(els[0], SUM));
  if (terms.length <= 1 && kids.length <= 1) return `<math display="inline">${inner}</math>`;
  return `<span class="mwrap">` + terms.map((term) => {
    // a long product's factors (invisible times at its top level) each a piece, joined without a space
    const factors = runs(term.flatMap((e) => (e.localName === "mrow" && [...e.children].some((c) => isOp(c, [TIMES]))
      ? [...e.children] : [e])), [TIMES]);
    return factors.length > 1 && term.length > 6 ? `<span class="term">${factors.map(sum).join("<wbr>")}</span>`
      : sum(term);
  }).join(" ") + "</span>";
}
/** A <math> wider than its cell cut finer: every nested row opened (fractions, scripts and roots kept whole), a
    piece before each +, -, = and each invisible times, the pieces side by side where a line may break. */
function splitDeeper(el) {
  const flat = [];
  const walk = (x) => { if (x.localName === "mrow" || x.localName === "math") for (const c of x.children) walk(c); else flat.push(x); };
  walk(el);
  const groups = runs(flat, [...SUM, TIMES]);
  if (groups.length < 2) return false;
  const span = document.createElement("span");
  span.className = "term";
  span.innerHTML = groups.map((g) => piece(g, g[0].localName === "mo" && g[0].textContent.trim() !== TIMES))
    .join("<wbr>");
  el.replaceWith(span);
  return true;
}
/** Formulas fit their cells: a piece too wide is cut finer (splitDeeper), and one still too wide (a wide fraction)
    set smaller until it fits -- never cut, never scrolled. */
function fitFormulas() {
  const room = (el) => { const box = el.parentElement.closest("td, .formula, p, div"); return box ? box.clientWidth - 4 : 0; };
  for (const el of [...document.querySelectorAll("#results math")]) {
    const r = room(el);
    if (r > 0 && el.getBoundingClientRect().width > r) splitDeeper(el);
  }
  for (const el of document.querySelectorAll("#results math")) {
    const r = room(el), wide = el.getBoundingClientRect().width;
    if (r > 0 && wide > r) el.style.fontSize = `${(Math.floor(r / wide * 1000) / 1000).toFixed(3)}em`;
  }
}
/** A term id that breaks after its dots (zero.optimizer.replicated), not inside a word. */
const termId = (id) => esc(id).replace(/\./g, ".<wbr>");
function valueCells(key, q) {
  return `<td class="num" id="v-${key}" data-exact="${Q.str(q)}">${fmtInt(q)}</td><td class="num" id="g-${key}">${fmtGiB(q)}</td>`;
}
/** A kind's symbol (M_A, M_E, ...: device_terms.kinds_of) as Table 10 prints it, M^A. */
const kindSymbol = (sym) => `<msup><mi>M</mi><mi>${esc(sym.split("_")[1])}</mi></msup>`;
function actFormula(m, kept, variant) {  // act.stage of the view's variant: the device assembly's expression
  const dev = familyOf(m).device, sym = {};
  for (const [kind, s] of Object.entries(dev.kinds)) sym[kind] = kindSymbol(s);
  const head = DATA.mathml[dev.stage[variant]];
  let out = `<div class="formula">${math(head)}</div><details><summary>the tensors kept per layer (this view)</summary>`;
  for (const [kind, list] of Object.entries(kept)) {
    if (kind === "mtp" && !list.length) continue;  // no MTP module trained (--mtp-activations none)
    const body = list.length ? list.map((k) => DATA.mathml[k.fn]).join("<mo>+</mo>") : "<mn>0</mn>";
    out += `<div class="formula">${math(`${sym[kind]}<mo>=</mo>${body}`)}</div>`;
  }
  return out + "</details>";
}
function render(m, t, est, gpu, lay) {
  const b = est.bytes, st = est.stage;
  // explain.stage_content: the family's CSA and HCA layers named beside the MoE count ("11 MoE (4 CSA, 7 HCA)")
  const fam = familyOf(m);
  const own = fam.counts.filter(([, f]) => fam.named_counts.includes(f)).map(([sym, f]) => [st.extra[sym] || 0, f])
    .filter(([n]) => n).map(([n, f]) => `${n} ${f}`).join(", ");
  const moe = st.moe ? `${st.moe} MoE` + (own ? ` (${own})` : "") : "";
  const stName = `stage ${st.index} (layers ${st.layers[0]}-${st.layers[1] - 1}: ${[st.embedding ? "embedding" : "", st.dense ? `${st.dense} dense` : "", moe, st.head ? "head" : ""].filter(Boolean).join(", ")})`;
  const gpus = lay.dp * lay.tp * lay.pp * lay.cp;
  let html = `<p id="summary"><strong>${esc(m.name)}</strong> on <span id="v-gpus">${gpus.toLocaleString("en-US")}</span> GPUs (DP ${lay.dp}, TP ${lay.tp}, PP ${lay.pp}, EP ${lay.ep}, ETP ${lay.etp}, CP ${lay.cp}), one device of <span id="v-stage" data-index="${st.index}">${esc(stName)}</span>; ZeRO ${t.zero} (${DATA.options.zero_names[t.zero]}), recompute ${esc(t.recompute === "custom" ? "custom:" + t.recompute_ops.join(",") : t.recompute)}, b=${t.mbs}, s=${t.seq}` +
    (t.schedule ? `; schedule ${esc(t.schedule)}, <span id="v-inflight">${fmtInt(est.inflight)}</span> micro-batches in flight` : "") + "</p>";
  html += `<table id="params"><caption>Parameters on the device (Table 6)</caption><thead><tr><th scope="col">quantity</th><th scope="col">formula</th><th scope="col">params</th><th scope="col">billions</th></tr></thead><tbody>`;
  const side = familyOf(m).states[structureKey(m)][`${t.conventions.rank}/${t.conventions.shared_expert}`];
  for (const [k, label, fn] of [["non_moe", "non-MoE P_n", side.P_n], ["moe", "MoE P_m", side.P_m], ["total", "total", null]]) {
    const q = est.params[k];
    html += `<tr><th scope="row">${label}</th><td class="formula">${fn === null ? math("<msub><mi>P</mi><mi>n</mi></msub><mo>+</mo><msub><mi>P</mi><mi>m</mi></msub>") : `<details><summary>formula</summary>${math(DATA.mathml[fn])}</details>`}</td>` +
      `<td class="num" id="v-params-${k}" data-exact="${Q.str(q)}">${fmtInt(q)}</td><td class="num">${(Q.float(q) / 1e9).toFixed(3)}</td></tr>`;
  }
  html += "</tbody></table>";
  html += `<table id="bytes"><caption>Bytes on the device (Tables 8 and 10)</caption><thead><tr><th scope="col">component</th><th scope="col">term</th><th scope="col">formula</th><th scope="col">bytes</th><th scope="col">GiB</th></tr></thead><tbody>`;
  for (const k of ["weights", "gradients", "optimizer"]) {
    const id = est.ids[k];
    const te = k === "weights" && t.linear_recipe ? ` + <code>${termId(`state.quantized.${t.linear_recipe}${t.quantized_params ? ".param-gather" : ""}`)}</code>` : "";
    html += `<tr><th scope="row"><span class="swatch" style="background:${COLORS[k]}"></span>${k}</th><td><code>${termId(id)}</code>${te}</td><td class="formula">${math(DATA.mathml[side.terms[id]])}</td>${valueCells("bytes-" + k, b[k])}</tr>`;
  }
  const actId = t.schedule ? "n<sub>fl</sub> &times; <code>act.<wbr>stage</code> <small>(held at the peak)</small>" : "<code>act.<wbr>stage</code> <small>(one micro-batch)</small>";
  const actTe = (t.linear_recipe ? ` + <code>${termId(`act.quantized.${t.linear_recipe}`)}</code>` : "")
    + (t.offload.length ? ` + <code>${termId(`act.offload.${t.offload.join("-")}`)}</code>` : "");
  html += `<tr><th scope="row"><span class="swatch" style="background:${COLORS.activations}"></span>activations</th><td>${actId}${actTe}</td><td class="formula">${actFormula(m, est.kept, est.variant)}</td>${valueCells("bytes-activations", b.activations)}</tr>`;
  if (b.runtime !== undefined) html += `<tr><th scope="row"><span class="swatch" style="background:${COLORS.runtime}"></span>runtime buffers</th><td><code>${termId(est.ids.runtime)}</code></td><td class="formula">cuBLAS workspaces (derivations/assembly/runtime.py)</td>${valueCells("bytes-runtime", b.runtime)}</tr>`;
  // the step's peak (memsym estimate's text): shown when one micro-batch's backward holds more than the end of its forward
  const stepped = Q.cmp(b.step, Q.n(0)) > 0;
  html += `<tr class="total"><th scope="row">total</th><td>${stepped ? "<small>at the end of the forward</small>" : ""}</td><td class="formula">${math("<mrow><mi>weights</mi><mo>+</mo><mi>gradients</mi><mo>+</mo><mi>optimizer</mi><mo>+</mo><mi>activations</mi>" + (b.runtime !== undefined ? "<mo>+</mo><mi>runtime</mi>" : "") + "</mrow>")}</td>${valueCells("bytes-total", b.total)}</tr>`;
  if (stepped) {
    const cast = Q.cmp(est.step.cast, Q.n(0)) !== 0 ? `<p class="note">less the head's cross-entropy backward transient (--ce-backward cast), which the moments replace: <span class="num">${fmtInt(est.step.cast)}</span> bytes</p>` : "";
    html += `<tr class="step"><th scope="row"><span class="swatch" style="background:${COLORS.step}"></span>+ one backward</th><td><code>${termId(est.ids.step)}</code></td>` +
      `<td class="formula">${est.step.fn === null ? "the offloaded core attention's backward: its saves reloaded, bmm's gradients (derivations/assembly/offload.py)" : `<details><summary>formula</summary>${math(DATA.mathml[est.step.fn])}${cast}</details>`}</td>${valueCells("bytes-step", b.step)}</tr>`;
    html += `<tr class="total step-total"><th scope="row">total at the step peak</th><td><small>what the verdict judges</small></td><td class="formula">${math("<mrow><mi>total</mi><mo>+</mo><mi>one backward</mi></mrow>")}</td>${valueCells("bytes-step_total", b.step_total)}</tr>`;
  }
  if (t.schedule) html += `<tr><th scope="row">one micro-batch, act.</th><td><code>act.<wbr>stage</code></td><td></td>${valueCells("bytes-activations_per_microbatch", b.activations_per_microbatch)}</tr>`;
  html += `<tr><th scope="row">${esc(familyOf(m).layer_label)}, act.</th><td><code>act.<wbr>layer</code></td><td class="formula">${math(DATA.mathml[familyOf(m).device.layer])}</td>${valueCells("bytes-activations_per_layer", b.activations_per_layer)}</tr>`;
  html += "</tbody></table>";
  // the verdict judges the step's peak (analyses/budget.py: the total plus the step excess, with the Sec. 6 overheads)
  const lo = est.overheads.low.step_peak, hi = est.overheads.high.step_peak, hbm = Q.n(gpu.bytes);
  const verdict = Q.cmp(hi, hbm) <= 0 ? "fits" : (Q.cmp(lo, hbm) <= 0 ? "fits only at the low end" : "does not fit");
  const span = (id, q) => `<span id="${id}" data-exact="${Q.str(q)}">${fmtGiB(q)}</span>`;
  const ends = (field, id) => `${span(`v-${id}-low`, est.overheads.low[field])} - ${span(`v-${id}-high`, est.overheads.high[field])} GiB`;
  html += `<p id="verdict" class="${verdict === "fits" ? "ok" : (verdict === "does not fit" ? "bad" : "warn")}">Against one ${esc(gpu.name)} (<span id="v-hbm" data-exact="${gpu.bytes}">${fmtGiB(hbm)}</span> GiB): peak with Sec. 6 overheads ${ends("peak", "peak")}` +
    (stepped ? ` at the end of the forward, ${ends("step_peak", "step-peak")} at the step peak` : "") +
    ` (${pct(lo, hbm)} - ${pct(hi, hbm)}): <strong id="v-verdict">${verdict}</strong>; allocated (no overheads) ${fmtGiB(b.step_total)} GiB${stepped ? " at the step peak" : ""}. <small>Reserved and device memory (the caching allocator run over the step, NCCL and DeepEP buffers) are judged by <code>memsym estimate --memory reserved|device</code>, not on this page.</small></p>`;
  html += bar(b, hbm, hi, est.ids.step);
  $("results").innerHTML = html;
}
/** The components stacked (and one micro-batch's backward at the step's peak, ``stepId`` its moment), the Sec. 6
    overheads to the judged peak ``hi`` and the GPU's capacity: an HTML bar as wide as the page, each segment labelled
    inside when its label fits (fitBar), and a legend that always gives every value. */
function bar(b, hbm, hi, stepId) {
  const scale = Math.max(Q.float(hi), Q.float(hbm)), pc = (q) => (Q.float(q) / scale * 100);
  let x = 0, segs = "", legend = "";
  for (const k of ["weights", "gradients", "optimizer", "activations", "runtime", "step"]) {
    if (b[k] === undefined || (k === "step" && !stepId)) continue;
    const w = Math.max(pc(b[k]), 0), name = k === "step" ? "backward" : k, what = k === "step" ? `one backward (${stepId})` : k;
    segs += `<div class="seg" style="left:${x.toFixed(3)}%;width:${w.toFixed(3)}%;background:${COLORS[k]}" title="${esc(what)}: ${fmtGiB(b[k])} GiB">` +
      `<span data-short="${fmtGiB(b[k], 1)}">${name} ${fmtGiB(b[k], 1)}</span></div>`;
    legend += `<li><span class="swatch" style="background:${COLORS[k]}"></span>${esc(name)} ${fmtGiB(b[k])} GiB</li>`;
    x += w;
  }
  const g = pc(hbm), p = pc(hi);
  segs += `<div class="over" style="left:${x.toFixed(3)}%;width:${Math.max(p - x, 0).toFixed(3)}%" title="Sec. 6 overheads (high end)"></div>`;
  segs += `<div class="gpu" style="left:${g.toFixed(3)}%"></div>`;
  const where = g > 60 ? `right:${(100 - g).toFixed(3)}%` : `left:${g.toFixed(3)}%`;
  legend += `<li><span class="swatch over"></span>Sec. 6 overheads (high end)</li>`;
  return `<div id="bar" role="img" aria-label="stacked bar of the components against the GPU"><div class="track">${segs}</div>` +
    `<div class="gpu-label" style="${where}">GPU ${fmtGiB(hbm, 0)} GiB</div></div><ul class="legend">${legend}</ul>`;
}
/** A segment's label shortened to its number, or hidden, when it does not fit inside (measured, not guessed). */
function fitBar() {
  for (const span of document.querySelectorAll("#bar .seg span")) {
    const room = span.parentElement.clientWidth - 6;
    if (span.scrollWidth > room) span.textContent = span.dataset.short;
    if (span.scrollWidth > room) span.hidden = true;
  }
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
    // a field folded away (Assumptions, Precision, more layout options) is unfolded to show why
    for (let el = slot.parentElement; el; el = el.parentElement) if (el.tagName === "DETAILS") el.open = true;
  }
  document.body.dataset.state = "error";
}
function clearRefusals() {
  for (const el of document.querySelectorAll(".field-error")) { el.textContent = ""; el.hidden = true; }
  for (const el of document.querySelectorAll(".field.invalid")) el.classList.remove("invalid");
  for (const el of document.querySelectorAll("[aria-invalid]")) { el.removeAttribute("aria-invalid"); el.removeAttribute("aria-describedby"); }
}

// ----------------------------------------------------------------------------- the URL and the command line
/** Every control as the command line names it: [flag without --, control id without opt-, kind] (memsym/page/form.py);
    the URL's keys (#tp=4&zero=1) and the command shown; config is the page's own. */
const stateOpts = () => DATA.form.state;
/** A control's value as the URL and the command line write it, or null when it is at its default (not typed). */
function controlValue(dest, kind) {
  const el = $(`opt-${dest}`);
  if (!el) return null;
  if (kind === "flag") return el.checked ? true : null;
  if (kind === "gpu") return el.value === PAGE_GPU ? null : el.value;
  if (kind === "model") return el.value === DATA.options.default_model || (el.value === "" && !el.options.length) ? null : el.value;
  if (dest === "config") return $("opt-model").value === "config" && el.value !== "" ? el.value : null;
  if (kind === "recompute") {
    if (el.value !== "custom") return el.value === "" ? null : el.value;
    return "custom:" + Object.keys(DATA.options.recompute_ops).filter((o) => $(`opt-op-${o}`).checked).join(",");
  }
  return el.value === "" ? null : el.value;
}
/** The URL's text of a value: percent-encoded but for what reads well in a URL (, : / + -). */
const urlText = (v) => encodeURIComponent(v).replace(/%2C/g, ",").replace(/%3A/g, ":").replace(/%2F/g, "/");
function hashOfControls() {
  const parts = [];
  for (const [key, dest, kind] of stateOpts()) {
    const v = controlValue(dest, kind);
    if (v !== null) parts.push(v === true ? key : `${key}=${urlText(v)}`);
  }
  return parts.join("&");
}
/** The URL follows the controls (history.replaceState: no new history entry per key typed, no hashchange). */
function writeHash() {
  const h = hashOfControls();
  const url = location.href.replace(/#.*$/, "") + (h ? "#" + h : "");
  if (url !== location.href) history.replaceState(null, "", url);
}
/** What the URL said that the page cannot show (an unknown key, a value no control offers): refused like a typed
    option until a control is changed. */
let hashProblems = [];
function resetControls() {
  for (const el of document.querySelectorAll("#controls input, #controls textarea, #controls select")) {
    if (el.type === "checkbox") el.checked = false;
    else if (el.tagName === "SELECT") el.selectedIndex = 0;
    else el.value = "";
  }
  $("opt-gpu").value = PAGE_GPU;
}
function applyHash() {
  hashProblems = [];
  resetControls();
  const text = location.hash.replace(/^#/, "");
  const byKey = Object.fromEntries(stateOpts().map((o) => [o[0], o]));
  for (const part of text.split("&")) {
    if (!part) continue;
    const eq = part.indexOf("=");
    let key, val;
    try {
      key = decodeURIComponent(eq < 0 ? part : part.slice(0, eq)).replace(/^--/, "");
      val = eq < 0 ? null : decodeURIComponent(part.slice(eq + 1));
    } catch (e) {
      hashProblems.push(new ConfigError(`the URL's ${arg_shown(part)} is not valid percent-encoding`, []));
      continue;
    }
    const opt = byKey[key];
    if (!opt) {
      hashProblems.push(new ConfigError(`the URL names ${arg_shown(key)}, which is not an option of memsym estimate this page has (e.g. #tp=4&zero=1)`, []));
      continue;
    }
    const [, dest, kind] = opt, el = $(`opt-${dest}`);
    if (!el) { hashProblems.push(new ConfigError(`the URL names --${key}, which this page does not offer`, [])); continue; }
    if (kind === "flag") {
      if (val === null || ["", "1", "true", "on", "yes"].includes(val.toLowerCase())) el.checked = true;
      else if (["0", "false", "off", "no"].includes(val.toLowerCase())) el.checked = false;
      else hashProblems.push(argError(dest, `--${key} is a switch: write it alone (#${key}) or ${key}=0, got ${arg_shown(val)}`));
      continue;
    }
    if (val === null) val = "";
    if (kind === "recompute" && val !== "") {  // read as --recompute reads it (training.parse_recompute, printed)
      try {
        const [rc, ops] = READERS.recompute(dest, val);
        el.value = rc;
        for (const o of Object.keys(DATA.options.recompute_ops)) $(`opt-op-${o}`).checked = ops.includes(o);
      } catch (e) { if (!(e instanceof ConfigError)) throw e; hashProblems.push(argError(dest, e.message)); }
      continue;
    }
    if (kind === "model" && val === "config.json" && [...el.options].some((o) => o.value === "config")) val = "config";
    if (el.tagName === "SELECT") {
      if (![...el.options].some((o) => o.value === val)) {  // argparse's words (not the command line's nearest choice)
        const choices = [...el.options].map((o) => pyRepr(o.value)).filter((v) => v !== "''");
        hashProblems.push(argError(dest, `invalid choice: ${pyRepr(val)} (choose from ${choices.join(", ")})`));
        continue;
      }
    }
    el.value = val;
  }
}

/** A word the shell reads as it is, else quoted ('...'). */
function shellWord(w) {
  w = String(w);
  return /^[A-Za-z0-9_.,:\/=+@%-]+$/.test(w) ? w : "'" + w.replace(/'/g, `'"'"'`) + "'";
}
/** `memsym estimate ...` of the controls: the command line that prints the numbers shown (with the --dp a GPU count
    sets, ``dp``: undefined when refused; a pasted config.json as --model config.json, the file to save). */
function commandLine(dp) {
  const out = ["memsym", "estimate"];
  for (const [key, dest, kind] of stateOpts()) {
    const v = controlValue(dest, kind);
    if (dest === "config") continue;
    if (dest === "dp" && v === null && dp !== undefined) { out.push("--dp", String(dp)); continue; }
    if (dest === "gpu") { out.push("--gpu", $("opt-gpu").value); continue; }
    if (v === null) continue;
    if (v === true) { out.push(`--${key}`); continue; }
    const text = kind === "model" && v === "config" ? "config.json" : v;
    out.push(text.startsWith("-") ? `--${key}=${text}` : `--${key}`, ...(text.startsWith("-") ? [] : [text]));
  }
  return out.map(shellWord).join(" ");
}
function showCommand(dp) {
  $("command-text").textContent = commandLine(dp);
  $("command-note").hidden = $("opt-model").value !== "config";
}

// ----------------------------------------------------------------------------- the page's life
/** The controls that show only when they apply: the operators of a custom recomputation, the pasted config.json. */
function showApplicable() {
  $("ops").hidden = $("opt-recompute").value !== "custom";
  if ($("opt-config")) $("field-opt-config").hidden = $("opt-model").value !== "config";
}
function update() {
  clearRefusals();
  showApplicable();
  let typed = null;
  try {
    if (hashProblems.length) throw hashProblems[0];
    typed = typedOptions();
    const a = resolve(typed, true), derived = "gpus" in typed && !("dp" in typed) ? a.dp : undefined;
    check_conflicts(a, typedDests(typed));
    const m = modelOf(a);
    // the empty fields' defaults: the model's family's (EP = ETP = 1 without experts), else the paper's
    for (const k of LAYOUT) {
      const f = familyOf(m).layout_defaults[k];
      $(`opt-${k}`).placeholder = k === "dp" && derived !== undefined ? `${derived} (from the GPUs)` : `${f === undefined ? DATA.options.layout[k] : f}`;
    }
    const lay = new Layout({ dp: a.dp, tp: a.tp, pp: a.pp, ep: a.ep, etp: a.etp, cp: a.cp, sp: a.sp,
      layers_per_stage: a.layers_per_stage });
    $("opt-gpus").placeholder = `${lay.dp * lay.tp * lay.pp * lay.cp} = DP TP PP CP`;
    const G = "global_batch" in typed ? typed.global_batch : null;
    const t = with_global_batch(lay, training_of(a, typedDests(typed)), G);
    const est = estimate(m, lay, t, "stage" in typed ? typed.stage : null);
    const gpu = DATA.gpus.find((g) => g.id === $("opt-gpu").value);
    render(m, t, est, gpu, lay);
    const err = $("error");
    err.textContent = ""; err.hidden = true;
    $("error-note").hidden = true;
    document.body.dataset.state = "ok";
    showCommand(derived);
    renderSearch({ typed, resolved: a, model: m, layout: lay, training: t, estimate: est, gpu, error: null });
  } catch (e) {
    $("results").innerHTML = "";  // first: whatever follows, no number of an earlier input stays
    document.body.dataset.state = "error";
    if (e instanceof ConfigError) showRefusal(oneLine(e.message), e.fields);
    else {  // a fault of the page itself: said, never a stale number
      showRefusal(`internal error of the page (please report it): ${e && e.name ? e.name + ": " : ""}${e && e.message !== undefined ? e.message : e}`, []);
      console.error(e);
    }
    try { showCommand(); } catch (e2) { $("command-text").textContent = ""; }
    renderSearch({ typed, error: e });  // the search reads no layout field: it may still run
  }
  fitFormulas();
  fitBar();
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
  const edited = (ev) => {
    if (ev.target && ev.target.id && ev.target.id.startsWith("opt-")) lastEdited = ev.target.id.slice(4);
    hashProblems = [];  // a control changed: the URL is the controls' again
  };
  $("controls").addEventListener("input", (ev) => { edited(ev); update(); writeHash(); });
  $("controls").addEventListener("change", (ev) => {
    edited(ev);
    if (ev.target.id === "opt-recipe") { try { applyRecipeDevice(); } catch (e) { console.error(e); } }
    update();
    writeHash();
  });
  $("command-copy").addEventListener("click", () => {
    const text = $("command-text").textContent;
    if (navigator.clipboard) navigator.clipboard.writeText(text).then(() => { $("command-copy").textContent = "copied"; }, () => {});
  });
  window.addEventListener("hashchange", () => { lastEdited = null; applyHash(); update(); });
  window.addEventListener("resize", () => { fitFormulas(); update(); });
  applyHash();
  update();
});
