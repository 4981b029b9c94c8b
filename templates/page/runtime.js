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
/** ``fn()``, a refusal of it shown at ``fields`` (the page's controls it concerns: interaction, not a rule). */
function concerning(fields, fn) {
  try { return fn(); } catch (e) { if (e instanceof ConfigError) e.fields = fields; throw e; }
}

// ----------------------------------------------------------------------------- Python's values (printed functions)
/* What the functions printed from the command line's Python (memsym/page/pyjs.py Printed) run on: Python's
   operators, builtins and methods over the page's values (an int a BigInt or a Number, a float a PyFloat, a dict a
   Map or an object, a str its code points). */
const big = (x) => typeof x === "bigint" || (typeof x === "number" && !Number.isSafeInteger(x));
const num = (x) => (x instanceof PyFloat ? x.v : x);
/** An integer result: a Number when it is exact as one. */
const pyInt = (x) => (Number.isSafeInteger(Number(x)) ? Number(x) : x);
/** a op b: floats if either is one, the page's rationals if either is a Fraction (``fraction``), else ints. */
function arith(a, b, ints, floats, fraction) {
  const f = (x) => (isQ(x) ? Q.float(x) : Number(num(x)));
  if (a instanceof PyFloat || b instanceof PyFloat) return new PyFloat(floats(f(a), f(b)));
  if (isQ(a) || isQ(b)) return fraction(a, b);
  return big(a) || big(b) ? pyInt(ints(BigInt(a), BigInt(b))) : ints(a, b);
}
const floorMod = (a, b) => ((a % b) + b) % b;
const isQ = (x) => x !== null && typeof x === "object" && typeof x.n === "bigint" && typeof x.d === "bigint";
/** Python's ordering of two numbers (a Fraction the page's rational Q: exact). */
const order = (a, b) => (isQ(a) || isQ(b) ? Q.cmp(a, b) : (num(a) < num(b) ? -1 : (num(a) > num(b) ? 1 : 0)));
const py = {
  bool: (x) => !(x === null || x === false || x === 0 || x === 0n || x === "" || (x instanceof PyFloat && x.v === 0)
    || (Array.isArray(x) && !x.length) || (x instanceof Map && !x.size) || (isQ(x) && x.n === 0n)),
  and: (a, b) => (py.bool(a) ? b() : a),
  or: (a, b) => (py.bool(a) ? a : b()),
  add: (a, b) => (typeof a === "string" || Array.isArray(a) ? a.concat(b)
    : arith(a, b, (x, y) => x + y, (x, y) => x + y, Q.add)),
  sub: (a, b) => arith(a, b, (x, y) => x - y, (x, y) => x - y, (x, y) => Q.add(x, Q.mul(-1, y))),
  mul: (a, b) => (Array.isArray(a) ? Array(Number(b) > 0 ? Number(b) : 0).fill(a).flat()
    : typeof a === "string" ? a.repeat(Number(b) > 0 ? Number(b) : 0)
    : arith(a, b, (x, y) => x * y, (x, y) => x * y, Q.mul)),
  truediv: (a, b) => arith(a, b, (x, y) => new PyFloat(Number(x) / Number(y)), (x, y) => x / y, Q.div),
  mod: (a, b) => arith(a, b, floorMod, floorMod),
  floordiv: (a, b) => arith(a, b, (x, y) => (typeof x === "bigint" ? (x - floorMod(x, y)) / y : Math.floor(x / y)),
    (x, y) => Math.floor(x / y)),
  eq(a, b) {
    if (Array.isArray(a) || Array.isArray(b))
      return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => py.eq(x, b[i]));
    if (isQ(a) || isQ(b)) return (isQ(a) || typeof a !== "object") && (isQ(b) || typeof b !== "object") && !order(a, b);
    a = num(a); b = num(b);
    if ((typeof a === "string") !== (typeof b === "string") || (a === null) !== (b === null)) return false;
    return a == b;  // eslint-disable-line eqeqeq (Python's 1 == 1.0 == True)
  },
  ne: (a, b) => !py.eq(a, b),
  lt: (a, b) => order(a, b) < 0,
  le: (a, b) => order(a, b) <= 0,
  gt: (a, b) => order(a, b) > 0,
  ge: (a, b) => order(a, b) >= 0,
  in(a, b) {
    if (typeof b === "string") return b.includes(a);
    if (b instanceof Map) return b.has(a);
    if (Array.isArray(b)) return b.some((x) => py.eq(x, a));
    return Object.prototype.hasOwnProperty.call(b, a);
  },
  notin: (a, b) => !py.in(a, b),
  getitem(x, k) {
    if (x instanceof Map) return x.get(k);
    if (Array.isArray(x) || typeof x === "string") return py.iter(x).at(Number(k));
    return x[k];
  },
  items: (x) => (x instanceof Map ? [...x] : Object.entries(x)),
  setitem(x, k, v) { if (x instanceof Map) x.set(k, v); else x[k] = v; },
  iter: (x) => (x instanceof Map ? [...x.keys()] : (typeof x === "string" ? Array.from(x)
    : (Array.isArray(x) ? x : Object.keys(x)))),
  str: (x) => (typeof x === "string" ? x : pyRepr(x)),
  repr: (x) => pyRepr(x),
  len: (x) => (typeof x === "string" ? cpLen(x) : (x instanceof Map ? x.size : py.iter(x).length)),
  type: (x) => (x === null ? "NoneType" : typeof x === "boolean" ? "bool" : typeof x === "string" ? "str"
    : x instanceof PyFloat ? "float" : Array.isArray(x) ? "list" : x instanceof Map ? "dict" : isQ(x) ? "Fraction"
      : typeof x === "object" ? "object" : "int"),
  isinstance(x, types) {
    const t = py.type(x);
    return [].concat(types).some((k) => k === t || (k === py.Fraction && t === "Fraction") || (k === "int" && t === "bool")
      || (k === "tuple" && t === "list"));
  },
  any: (xs) => py.iter(xs).some(py.bool),
  all: (xs) => py.iter(xs).every(py.bool),
  sum: (xs, start = 0) => py.iter(xs).reduce(py.add, start),
  min: (...xs) => (xs.length === 1 ? py.iter(xs[0]) : xs).reduce((a, b) => (py.lt(b, a) ? b : a)),
  max: (...xs) => (xs.length === 1 ? py.iter(xs[0]) : xs).reduce((a, b) => (py.gt(b, a) ? b : a)),
  /** min(xs, key=, default=) and max(...): the first least or largest by ``key`` (null: the item itself). */
  min_of: (xs, key, dflt) => py.best(xs, key, dflt, py.lt),
  max_of: (xs, key, dflt) => py.best(xs, key, dflt, py.gt),
  best(xs, key, dflt, better) {
    const k = key || ((x) => x), items = py.iter(xs);
    if (!items.length && dflt === undefined) throw new Error("ValueError: empty sequence");
    return items.length ? items.reduce((a, b) => (better(k(b), k(a)) ? b : a)) : dflt;
  },
  /** range(a, b, step): its items, with Python's start and stop */
  range(a, b, step = 1) {
    if (b === undefined) return py.range(0, a);
    const out = [];
    for (let i = Number(a); step > 0 ? i < Number(b) : i > Number(b); i += Number(step)) out.push(i);
    return Object.assign(out, { start: Number(a), stop: Number(b) });
  },
  slice(x, lo, hi) {
    const out = (typeof x === "string" ? Array.from(x) : x).slice(lo ?? undefined, hi ?? undefined);
    return typeof x === "string" ? out.join("") : out;
  },
  divmod: (a, b) => [py.floordiv(a, b), py.mod(a, b)],
  accumulate(xs) {  // itertools.accumulate: the running sums
    const out = [];
    for (const x of py.iter(xs)) out.push(out.length ? py.add(out[out.length - 1], x) : x);
    return out;
  },
  replace: (x, kw) => Object.assign(Object.create(Object.getPrototypeOf(x)), x, Object.fromEntries(kw)),
  zip: (...xs) => py.iter(xs[0]).slice(0, Math.min(...xs.map(py.len))).map((_, i) => xs.map((x) => py.iter(x)[i])),
  enumerate: (xs) => py.iter(xs).map((x, i) => [i, x]),
  list: (xs) => [...py.iter(xs)],
  tuple: (xs) => [...py.iter(xs)],
  frozenset: (xs = []) => [...new Set(py.iter(xs))],
  set: (xs = []) => [...new Set(py.iter(xs))],
  union: (a, b) => [...new Set(a.concat(b))],
  dict: (x) => new Map(Array.isArray(x) ? x : py.items(x)),
  int: (x) => (typeof x === "boolean" ? +x : pyInt(typeof x === "string" ? BigInt(x.trim()) : x)),
  next: (xs, dflt) => (py.iter(xs).length ? py.iter(xs)[0] : dflt),
  getattr(x, k, ...dflt) {
    const v = dflt.length && (x === null || !(k in Object(x))) ? dflt[0] : x[k];
    return typeof v === "function" && x !== null && k in Object(x) ? v.bind(x) : v;  // a bound method
  },
  /** fractions.Fraction of a number, or of a text the readers' patterns allow (a decimal, an exponent of at most two
      digits, or N/D: an exact rational; a zero denominator throws). */
  Fraction(x) {
    if (typeof x !== "string") return Q.of(x);
    const m = /^([0-9]+)(?:\/([0-9]+)|(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?)$/.exec(x);
    if (m === null) throw new Error(`Invalid literal for Fraction: ${x}`);
    if (m[2] !== undefined) return Q.make(BigInt(m[1]), BigInt(m[2]));
    const n = BigInt(m[1] + (m[3] || "")), scale = (m[3] || "").length - Number(m[4] || 0);
    return scale >= 0 ? Q.make(n, 10n ** BigInt(scale)) : Q.make(n * 10n ** BigInt(-scale), 1n);
  },
  /** re.compile(pattern): its fullmatch (the limits' patterns read the same in both). */
  compile: (pattern) => ({ fullmatch: (s) => new RegExp(`^(?:${pattern})$`).test(s) }),
  /** argparse.ArgumentTypeError: said as "argument --<option>: message" by the field's reader (ui.js). */
  argerror: (message) => Object.assign(new ConfigError(message, []), { constraint: "argument" }),
  /** A ConfigError of the command line's (constraint, message), next to the fields it concerns (DATA.form.refused,
      a limit's option, a family's divisibility rule's degree; a config.json's: set by the caller). */
  error(constraint, message) {
    const rule = Object.values(DATA.families).flatMap((f) => f.divides).find(([name]) => name === constraint);
    const R = DATA.form.refused;
    const fields = R[constraint] || R[constraint.split(".")[0]]
      || (rule ? [rule[2]] : [constraint.replace(/^limit\./, "")]);
    return Object.assign(new ConfigError(message, fields), { constraint });
  },
  m: {  // Python's methods of str, list and dict
    get: (x, k, dflt = null) => (py.in(k, x) ? py.getitem(x, k) : dflt),
    items: (x) => py.items(x),
    keys: (x) => py.iter(x),
    values: (x) => py.items(x).map(([, v]) => v),
    split: (s, sep) => s.split(sep),
    join: (sep, xs) => py.iter(xs).join(sep),
    update(x, y) { for (const [k, v] of py.items(y)) py.setitem(x, k, v); return null; },
    upper: (s) => s.toUpperCase(),
    strip: (s) => pyStrip(s),
    lstrip(s, chars) { let i = 0; while (i < s.length && chars.includes(s[i])) i++; return s.slice(i); },
    startswith: (s, prefix) => s.startsWith(prefix),
    replace: (s, a, b) => s.split(a).join(b),
    partition(s, sep) {
      const i = s.indexOf(sep);
      return i < 0 ? [s, "", ""] : [s.slice(0, i), sep, s.slice(i + sep.length)];
    },
    append(xs, x) { xs.push(x); return null; },
    format: (s, kw) => s.replace(/\{(\w+)\}/g, (_, k) => py.str(py.getitem(kw, k))),
  },
};
/** derivations.families as the page reads a pasted config.json: DeepSeek's family reads it (from_fields, printed),
    another family's is refused (its page is written by memsym page --model). */
const FAMILIES = {
  wrapper(mt) {
    const w = DATA.options.wrappers.find((x) => x[0] === mt);
    return w === undefined ? null : w.slice(1);
  },
  model_types: () => DATA.options.all_model_types,
  covered: () => DATA.options.covered,
  for_model_type(mt) {
    const other = DATA.options.other_families[mt];
    if (other !== undefined) {
      return { read_config(f) {
        throw f.err("model_type", `model_type ${json_shown(mt)} (${other}): the page reads pasted DeepSeek-family `
          + "configs; write a page for this one with memsym page --model config.json");
      } };
    }
    return DATA.options.model_types.includes(mt) ? { read_config: from_fields } : null;
  },
};
/** derivations.families.get and find: a family's declaration as the page has it (memsym/page/data.py family_data). */
FAMILIES.get = FAMILIES.find = (name) => {
  const f = DATA.families[name];
  return f === undefined ? null : Object.assign({}, f, { name,
    layout_defaults: () => new Map(Object.entries(f.layout_defaults)),
    divides: f.divides.map(([rule, symbol, axis, text]) => ({ rule, symbol, axis, text })) });
};
/** resolve._family_of: the family of the model the options name (a pasted config.json's by its model_type), or
    null when the page has none for it. */
FAMILIES.family_of = (model) => {
  let spec = DATA.models[model] || DATA.released[model] || DATA.options.presets[model];
  if (model === "config.json") {
    try {
      const mt = readConfigJSON($("opt-config").value, "", []).get("model_type");
      spec = { family: DATA.options.model_types.includes(mt) ? "deepseek" : null };
    } catch (e) { spec = null; }
  }
  // a recipe's model on a page of other models: its family as the page data names it (options.py _recipe_family)
  const recipe = Object.values(DATA.options.recipes).find((r) => r.model === model);
  return spec ? FAMILIES.find(spec.family) : (recipe ? recipe.family : null);
};
/** A model of the page (model_data) as the printed functions read a ModelSpec (named() its symbols' values), with the
    page's layer kinds and features (compose); a pasted config.json's is the printed ModelSpec read. */
const specOf = (m) => (m.spec ? Object.assign(Object.create(m.spec), { kinds: m.kinds, features: m.features })
  : Object.assign({}, m, { named: () => new Map(Object.entries(m.named).map(([k, v]) => [k, BigInt(v)])),
    mtp_layer_features: () => m.mtp_features }));
/** memsym/page/data.py model_data of a model read on the page (a pasted config.json). */
function modelData(s) {
  return { family: s.family, name: s.name, structure: s.structure.map(Boolean), l: Number(s.l), kinds: s.layer_kinds(),
    features: s.layer_features(), mtp_features: s.mtp_layer_features(), tie_word_embeddings: s.tie_word_embeddings,
    named: Object.fromEntries([...s.named()].map(([k, v]) => [k, String(v)])), mtp_layers: Number(s.mtp_layers),
    spec: s };
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
// ----------------------------------------------------------------------------- layout (derivations/config/layout.py)
function compose(m, range, first, last, index) {
  let dense = 0;
  for (let i = range[0]; i < range[1]; i++) if (m.kinds[i] === "dense") dense++;
  // the family's own counts (Family.counts: DeepSeek's L_I), each its layers holding a feature (StageComposition.extra)
  const extra = {};
  for (const [sym, feature] of familyOf(m).counts) {
    extra[sym] = 0;
    for (let i = range[0]; i < range[1]; i++) if (m.features[i].includes(feature)) extra[sym]++;
  }
  return { index, layers: range, dense, moe: range[1] - range[0] - dense, embedding: first, head: last, extra,
    label: layers_label(range[0], range[1]), named() { return new Map(Object.entries(subsComposition(this))); } };
}
/** layout.stages: each stage's [first layer, end) of the printed layout.stage_layers (its ranges as lists). */
function stages(m, lay) {
  const split = stage_layers(specOf(m), lay).map((r) => [r[0], r[0] + r.length]);
  return split.map((r, i) => compose(m, r, i === 0, i === split.length - 1, i));
}
// ----------------------------------------------------------------------------- schedules (derivations/assembly/schedules.py)
// a chunk's part of its stage's composition (schedules.Chunk.composition): all, its layers, or its head
function partComposition(comp, part) {
  if (part === "layers") return Object.assign({}, comp, { head: false });
  if (part === "head")
    return Object.assign({}, comp, { dense: 0, moe: 0, embedding: false, extra: Object.fromEntries(Object.keys(comp.extra).map((k) => [k, 0])) });
  return comp;
}

/** config.values.named (printed): {symbol: value} of a configuration, as the page's rationals. */
const substitution = (m, lay, t, comp) => Object.fromEntries([...named(specOf(m), lay, t, comp || null)].map(([k, x]) => [k, Q.of(x)]));

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
      throw missing_symbol(m, sym);
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
    rank (the printed sides.mtp_stage_shift). */
function heldComposition(m, lay, t, held) {
  const sum = new Map(Object.keys(subsComposition(held[0])).map((k) => [k, Q.add(...held.map((c) => subsComposition(c)[k]))]));
  return Object.fromEntries(t.conventions.mtp ? mtp_stage_shift(specOf(m), lay.pp, sum) : sum);
}
/** The model states of the held stages (device._model_states): the weight side's printed terms at the
    held composition, or at the whole model for Megatron's shard. */
function modelStates(m, lay, t, held, subs, cached) {
  const side = familyOf(m).states[structureKey(m)][`${t.conventions.rank}/${t.conventions.shared_expert}`];
  concerning(["conventions", "rank", "shared_expert"], () => weight_side_of(specOf(m), t.conventions));
  const ids = Object.assign({}, side.ids[String(t.zero)]);
  let at, key;
  if (t.conventions.rank === "megatron") {
    key = "megatron";
    at = () => Object.fromEntries([...megatron_values(specOf(m), lay, t)].map(([k, x]) => [k, Q.of(x)]));
  } else {
    const sums = heldComposition(m, lay, t, held);
    key = Object.values(sums).map(Q.str).join("|");
    at = () => Object.assign({}, subs, sums);
  }
  return cached("states:" + key, () => {
    const d = at(), bytes = {};
    for (const k of ["weights", "gradients", "optimizer"]) bytes[k] = FNS[side.terms[ids[k]]](d);
    if (t.linear_recipe !== null) {  // TE's cached quantized weight copies (quantized.copies), beside the weights
      concerning(["linear_recipe", "rank", "conventions"], () => check_recipe_rank(specOf(m), t));
      const lin = side.linear === undefined ? Q.n(0) : FNS[side.linear](d);
      bytes.weights = Q.add(bytes.weights, quantized_copies(t, lin, new Map(t.bytes).get("B_w")));
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
  const held = t.schedule !== null ? held_stages(t.schedule, lay.pp, index).map((i) => all[i]) : [comp];
  const states = modelStates(m, lay, t, held, subs, cached);
  const ranked = t.virtual_layers === null ? null : concerning(["virtual_layers", "pp", "vpp", "layers_per_stage",
    "microbatches"], () => rank_chunks(m, lay, t, comp));
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
    const off = cached("offload", () => concerning(["offload_activations", "model"], () => offload_per_layer(m, t, subs)));
    // offload.resident: the rank's last decoder layer of micro-batch 0 keeps its tensors (none on a stage with the
    // MTP modules' activations: their layer is the one kept)
    const none = comp.layers[1] === comp.layers[0] || (comp.head && t.conventions.mtp_activations === "last-stage" && m.mtp_layers);
    Object.assign(out, { O_D: off.get("dense"), O_E: off.get("moe"), O_R: none ? zero : off.get(m.kinds[comp.layers[1] - 1]) });
  }
  if (t.linear_recipe !== null) {  // quantized.per_layer
    const q = cached("quantized", () => concerning(["linear_recipe", "model"], () => quantized_per_layer(m, t, subs)));
    Object.assign(out, { Q_D: q.get("dense"), Q_E: q.get("moe"), Q_H: q.get("head") });
  }
  return out;
}
/** offload.kept_tensors: {kind: {tensor key: bytes}} of the tensors training ``t``'s view keeps (every kind) at
    ``subs`` (evaluate.tensor_values); the kept tensors of a training object computed once. */
const KEPT = new WeakMap();
function keptTensors(m, t, subs) {
  if (!KEPT.has(t)) KEPT.set(t, new Map());
  if (!KEPT.get(t).has(m)) KEPT.get(t).set(m, keptUnits(m, t));
  return Object.fromEntries(Object.entries(KEPT.get(t).get(m)).map(([kind, list]) =>
    [kind, Object.fromEntries(list.map((k) => [k.unit.key, FNS[k.fn](subs)]))]));
}
// ----------------------------------------------------------------------------- --virtual-layers (schedules.py)
/** device._virtual_peak: the largest state of the rank's interleaved order, each chunk's one micro-batch (the head
    with the last) weighed by its in-flight count; {held, chunks: [[composition, in flight], ...], head: its count or
    null, before: the largest held before the backward of a chunk with layers (offloading)}. */
function virtualPeak(m, lay, t, index, chunks, inputs) {
  const variant = variantOf(t, "paper"), last = chunks[chunks.length - 1];
  const at = (c) => assemble(m, variant, Object.assign({}, inputs, subsComposition(c), { O_R: Q.n(0) })).activations;
  const [held, state, before] = interleaved_peak(lay.pp, t.microbatches || 4 * lay.pp, index,
    chunks.map((c) => at(partComposition(c, "layers"))), last.head ? at(partComposition(last, "head")) : Q.n(0),
    chunks.map((c) => c.layers[1] > c.layers[0]));
  return { held, chunks: chunks.map((c, i) => [c, state[i]]), head: last.head ? state[state.length - 1] : null, before };
}
const subsComposition = (c) => Object.assign({ L_d: Q.n(c.dense), L_m: Q.n(c.moe), e_E: Q.n(c.embedding ? 1 : 0), e_H: Q.n(c.head ? 1 : 0) },
  Object.fromEntries(Object.entries(c.extra).map(([k, x]) => [k, Q.n(x)])));
/** device.step_excess (printed) of device inputs ``d``: {bytes, id, fn: its moment's formula (null when none), cast:
    the head's cross-entropy backward transient the moments replace (device.step_inputs)}. */
function stepExcess(m, t, d) {
  const [bytes, id] = step_excess(m, t, d.inputs, d.subs);
  const row = Object.values(familyOf(m).device.step).flatMap(Object.values).flat().find((r) => r[2] === id);
  const cast = step_inputs(t, d.inputs, d.subs, (x) => keptKinds(m, x, d.subs), m.family)[1];
  return { bytes, id, fn: row ? row[1] : null, cast };
}
/** device._kinds: {kind: bytes} of one layer's tensors training ``t``'s view keeps at ``values``; they read no
    composition (deviceInputs), so the stages of one estimate share them (the last 64 kept). */
const KINDS = new Map(), SIGNATURES = new WeakMap();
function keptKinds(m, t, values) {
  if (!SIGNATURES.has(values)) {  // the values but the composition's
    const skip = new Set(["L_d", "L_m", "e_E", "e_H", ...familyOf(m).counts.map(([sym]) => sym)]);
    SIGNATURES.set(values, Object.entries(values).filter(([k]) => !skip.has(k)).map(([k, x]) => `${k}=${isQ(x) ? Q.str(x) : x}`));
  }
  const key = JSON.stringify([m.name, t.recompute, viewKey(t), SIGNATURES.get(values)]);
  if (!KINDS.has(key)) {
    if (KINDS.size >= 64) KINDS.clear();
    KINDS.set(key, kindValues(m, keptUnits(m, t), values));
  }
  return KINDS.get(key);
}
/** evaluate.step: {moment: bytes} of the framework's moments under the policy at ``v`` (a symbol not given: 0). */
function stepMoments(framework, policy, v, family) {
  const moments = DATA.families[family].device.step[framework][policy], at = Object.fromEntries(v);
  for (const [, fn] of moments) for (const sym of DATA.reads[fn]) if (at[sym] === undefined) at[sym] = Q.n(0);
  return new Map(moments.map(([name, fn]) => [name, FNS[fn](at)]));
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
  let step = stepExcess(m, t, d);
  for (const comp of d.held) {
    if (comp.index === d.comp.index) continue;
    const subs = cached("subs:" + compKey(comp), () => substitution(m, lay, t, comp));
    const other = stepExcess(m, t, Object.assign({}, d, { subs, inputs: Object.assign({}, d.inputs, subs) }));
    if (Q.cmp(other.bytes, step.bytes) > 0) step = other;
  }
  if (t.offload.length) {  // an offloaded layer's core-attention backward (offload.step_moment), when it holds more
    const before = d.virtual !== null ? d.virtual.before : Q.add(v.activations, Q.mul(-1, d.inputs.O_R));
    const x = Q.add(step_moment(m, t, d.subs, before), Q.mul(-1, v.activations));
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
function estimate(m, lay, t, stageIndex) {
  validate_layout(specOf(m), lay, t.seq);
  validate_training(t);
  check_options(specOf(m), t);
  check_mtp(m, t.conventions);
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
  concerning(["stage", "pp"], () => layout_stage(m, lay, stageIndex));
  return device(m, lay, t, stageIndex, all, memo);
}
