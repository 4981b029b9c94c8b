"use strict";
/* The fields as argtypes.py's argparse types read them and a pasted config.json as hfconfig.read_json does, within
   DATA.inputs (limits.py), with the command line's messages; every loop is bounded by the text's length. */

const IN = DATA.inputs;

// ----------------------------------------------------------------------------- Python's text rules
function inRanges(ranges, c) {
  let lo = 0, hi = ranges.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (c < ranges[mid][0]) hi = mid - 1;
    else if (c > ranges[mid][1]) lo = mid + 1;
    else return true;
  }
  return false;
}
const isPySpace = (c) => inRanges(IN.space, c);
const isPrintable = (c) => !inRanges(IN.nonprintable, c);
/** Python's len(): code points (a lone surrogate counts one, as in a Python str). */
const cpLen = (s) => s.length - (s.match(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g) || []).length;
/** Python's str.strip() (Unicode white space, str.isspace). */
function pyStrip(s) {
  let a = 0, b = s.length;
  while (a < b && isPySpace(s.charCodeAt(a))) a++;
  while (b > a && isPySpace(s.charCodeAt(b - 1))) b--;
  return s.slice(a, b);
}
const hex = (c, n) => c.toString(16).padStart(n, "0");
/** Python's repr() of a str. */
function reprStr(s) {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    const c = ch.codePointAt(0);
    if (ch === quote || ch === "\\") out += "\\" + ch;
    else if (ch === "\t") out += "\\t";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (c < 0x20 || c === 0x7f) out += "\\x" + hex(c, 2);
    else if (c < 0x7f || isPrintable(c)) out += ch;
    else if (c <= 0xff) out += "\\x" + hex(c, 2);
    else if (c <= 0xffff) out += "\\u" + hex(c, 4);
    else out += "\\U" + hex(c, 8);
  }
  return out + quote;
}
/** A JSON number Python reads as a float (a Python float: repr 7168.0, 1e+300, inf, nan). */
class PyFloat { constructor(v) { this.v = v; } }
/** Python's repr() of a float: the shortest digits that read back (JavaScript's too), in exponent notation outside
    1e-4 <= |v| < 1e16 with at least two exponent digits (float_repr_style 'short'). */
function reprFloat(v) {
  if (!Number.isFinite(v)) return Number.isNaN(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  const a = Math.abs(v), sign = Object.is(v, -0) ? "-" : "";
  if (a !== 0 && (a < 1e-4 || a >= 1e16)) return v.toExponential().replace(/e([+-])(\d)$/, "e$10$2");
  return sign + String(v) + (Number.isInteger(v) ? ".0" : "");
}
/** Python's repr() of a value: a parsed JSON value (Map, Array, string, BigInt, PyFloat, boolean,
    null) or a number of the page (an integer). */
function pyRepr(x) {
  if (x === null || x === undefined) return "None";
  if (x === true) return "True";
  if (x === false) return "False";
  if (typeof x === "string") return reprStr(x);
  if (typeof x === "bigint") return x.toString();
  if (typeof x === "number") return Number.isInteger(x) ? String(x) : reprFloat(x);
  if (x instanceof PyFloat) return reprFloat(x.v);
  if (Array.isArray(x)) return "[" + x.map(pyRepr).join(", ") + "]";
  if (x instanceof Map) return "{" + Array.from(x, ([k, v]) => `${reprStr(k)}: ${pyRepr(v)}`).join(", ") + "}";
  return String(x);
}
/** cli.one_line: what a message shows of a character that is not printable (a typed newline: \n). */
function oneLine(message) {
  let out = "";
  for (const ch of message) {
    const c = ch.codePointAt(0);
    out += ch === " " || isPrintable(c) ? ch : reprStr(ch).slice(1, -1);
  }
  return out;
}
/** UTF-8 bytes of s[:end] (TextEncoder: a lone surrogate as U+FFFD's three bytes, the three it would take) */
const utf8Len = (s, end) => new TextEncoder().encode(end === undefined ? s : s.slice(0, end)).length;

// ----------------------------------------------------------------------------- config.json (hfconfig.read_json)
/** A pasted config.json's object as hfconfig.read_json reads the file ``path`` (CPython's _json grammar and messages,
    a byte-order mark skipped): integers as BigInt, floats as PyFloat, objects as Map; a field named twice, more than
    CONFIG_DIGITS digits or CONFIG_DEPTH levels refused.  Throws ConfigError("<path>: ...", fields). */
function readConfigJSON(raw, path, fields) {
  const fail = (msg) => new ConfigError(`${path}: ${msg}`, fields);
  const size = utf8Len(raw);
  if (size > IN.config_bytes) throw fail(`is ${size} bytes; a config.json is a few KiB (limit ${IN.config_bytes} bytes)`);
  const lone = raw.search(/\p{Cs}/u);  // a lone surrogate (a pair is one code point): its bytes are not UTF-8
  if (lone >= 0) throw fail(`not a UTF-8 JSON file (invalid continuation byte at byte ${utf8Len(raw, lone)})`);
  const skip = raw.charCodeAt(0) === 0xfeff ? 1 : 0;
  const s = raw.slice(skip), skipBytes = skip ? 3 : 0;
  // code points, as Python indexes a str (positions in messages are code point offsets)
  const n = cpLen(s), cp = new Int32Array(n), u16 = new Int32Array(n + 1);
  for (let i = 0, k = 0; i < s.length; k++) {
    const c = s.codePointAt(i);
    u16[k] = i; cp[k] = c; i += c > 0xffff ? 2 : 1;
  }
  u16[n] = s.length;
  const at = (pos) => `byte ${utf8Len(s, u16[pos]) + skipBytes}`;
  class JSONError { constructor(msg, pos) { this.msg = msg; this.pos = pos; } }
  class StopIter { constructor(pos) { this.pos = pos; } }
  class Deep {}
  const WS = (c) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
  const is = (i, text) => { for (let j = 0; j < text.length; j++) if (cp[i + j] !== text.charCodeAt(j)) return false; return true; };
  let firstDeep = null;  // where the nesting first goes deeper than CONFIG_DEPTH

  // a string's longest valid run: characters but '"', '\\' and controls, and escapes (_json.c's grammar); its
  // group set when the run ends with a \uXXXX escape
  const RUN = /(?:[^"\\\x00-\x1f]+|\\["\\/bfnrt]|(\\u[0-9a-fA-F]{4}))*/y;
  function scanString(end) {  // _json.c scanstring_unicode; end: just after the opening quote
    RUN.lastIndex = u16[end];
    const [run, lastU] = RUN.exec(s), next = end + cpLen(run), c = cp[next];
    if (next < n && c === 0x22) return [JSON.parse(`"${run}"`), next + 1];  // the browser decodes as Python does
    // a \uXXXX escape is refused when its digits reach the end of the text (scanstring_unicode: end >= len)
    if (next >= n && lastU !== undefined) throw new JSONError("Invalid \\uXXXX escape", next - 5);
    if (next >= n || (c === 0x5c && next + 1 === n)) throw new JSONError("Unterminated string starting at", end - 1);
    if (c <= 0x1f) throw new JSONError("Invalid control character at", next);
    throw cp[next + 1] === 0x75 ? new JSONError("Invalid \\uXXXX escape", next + 1) : new JSONError("Invalid \\escape", next);
  }
  const NUMBER = /(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;  // json.scanner's NUMBER_RE, ASCII digits
  function scanNumber(start) {  // _json.c _match_number_unicode, then hfconfig._parse_int or float()
    NUMBER.lastIndex = u16[start];
    const got = NUMBER.exec(s);
    if (got === null) throw new StopIter(start);
    const text = got[0], idx = start + text.length;  // ASCII: as many code points as UTF-16 units
    if (got[2] !== undefined || got[3] !== undefined) return [new PyFloat(Number(text)), idx];
    if (text.replace(/^-+/, "").length > IN.config_digits)  // jsonfile._number_at: where the decoder stopped
      throw fail(`a number of ${text.length} digits at ${at(start)}: no config field has more than ${IN.config_digits}`);
    return [BigInt(text), idx];
  }
  function scanOnce(idx, depth) {  // _json.c scan_once_unicode
    if (idx >= n) throw new StopIter(idx);
    const c = cp[idx];
    if (c === 0x22) return scanString(idx + 1);
    if (c === 0x7b || c === 0x5b) {
      if (depth + 1 > IN.config_depth && firstDeep === null) firstDeep = idx;
      if (depth + 1 >= IN.json_recursion) throw new Deep();  // Python's RecursionError
      return c === 0x7b ? parseObject(idx + 1, depth + 1) : parseArray(idx + 1, depth + 1);
    }
    if (c === 0x6e && idx + 3 < n && is(idx, "null")) return [null, idx + 4];
    if (c === 0x74 && idx + 3 < n && is(idx, "true")) return [true, idx + 4];
    if (c === 0x66 && idx + 4 < n && is(idx, "false")) return [false, idx + 5];
    if (c === 0x4e && idx + 2 < n && is(idx, "NaN")) return [new PyFloat(NaN), idx + 3];
    if (c === 0x49 && idx + 7 < n && is(idx, "Infinity")) return [new PyFloat(Infinity), idx + 8];
    if (c === 0x2d && idx + 8 < n && is(idx, "-Infinity")) return [new PyFloat(-Infinity), idx + 9];
    return scanNumber(idx);
  }
  function skipWS(idx) { while (idx < n && WS(cp[idx])) idx++; return idx; }
  function items(idx, close, item) {  // _json.c: an object's or array's items up to ``close``, each read by item(idx)
    idx = skipWS(idx);
    if (idx < n && cp[idx] === close) return idx + 1;
    for (;;) {
      idx = skipWS(item(idx));
      if (idx < n && cp[idx] === close) return idx + 1;
      if (idx >= n || cp[idx] !== 0x2c) throw new JSONError("Expecting ',' delimiter", idx);
      idx = skipWS(idx + 1);
    }
  }
  function parseObject(idx, depth) {  // _json.c _parse_object_unicode, then hfconfig._object
    const pairs = [], out = new Map();
    const end = items(idx, 0x7d, (at) => {
      if (at >= n || cp[at] !== 0x22) throw new JSONError("Expecting property name enclosed in double quotes", at);
      const [key, after] = scanString(at + 1);
      at = skipWS(after);
      if (at >= n || cp[at] !== 0x3a) throw new JSONError("Expecting ':' delimiter", at);
      const [val, next] = scanOnce(skipWS(at + 1), depth);
      pairs.push([key, val]);
      return next;
    });
    for (const [k, v] of pairs) {
      if (out.has(k)) throw fail(`field ${json_shown(k)} appears twice in one object`);
      out.set(k, v);
    }
    return [out, end];
  }
  function parseArray(idx, depth) {  // _json.c _parse_array_unicode
    const out = [];
    const end = items(idx, 0x5d, (at) => {
      const [val, next] = scanOnce(at, depth);
      out.push(val);
      return next;
    });
    return [out, end];
  }
  let data;
  try {
    if (n && cp[0] === 0xfeff) throw new JSONError("Unexpected UTF-8 BOM (decode using utf-8-sig)", 0);
    let end;
    try { [data, end] = scanOnce(skipWS(0), 0); } catch (e) { if (e instanceof StopIter) throw new JSONError("Expecting value", e.pos); throw e; }
    end = skipWS(end);
    if (end !== n) throw new JSONError("Extra data", end);
  } catch (e) {
    if (e instanceof JSONError) {
      let line = 1, lastNL = -1;
      for (let i = 0; i < e.pos; i++) if (cp[i] === 0x0a) { line++; lastNL = i; }
      throw fail(`not valid JSON: ${e.msg} (${at(e.pos)}, line ${line}, column ${e.pos - lastNL})`);
    }
    if (!(e instanceof Deep)) throw e;
    data = undefined;
  }
  if (data === undefined || firstDeep !== null)
    throw fail(`nested deeper than ${IN.config_depth} levels at ${at(firstDeep)} (a config.json nests 3 levels)`);
  if (!(data instanceof Map)) throw fail(`a config.json holds a JSON object, got ${typeName(data)}`);
  return data;
}
