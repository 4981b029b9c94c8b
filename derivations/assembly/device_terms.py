"""The per-device assembly as terms, printed (never assembled by hand) as exact Python by ``python -m
derivations.generate`` (``device`` in derivations/generated/) and as BigInt-rational JavaScript by ``memsym page``: an
ordered list of (name, expression), each reading the inputs and the names before it. Inputs:

  M_A, M_E, M_D, M_H, M_MTP  one layer's (sublayer's) kept activations of each kind under the view
  L_d, L_m, e_E, e_H, D      the stage's composition (Table 4) and the MTP depth
  L_d_c, L_m_c, e_E_c, e_H_c, n_fl_c   chunk c of a schedule (schedules.py): its part and its micro-batches in flight
  weights, gradients, optimizer, runtime   the model states of the held stages (Table 8), the runtime buffers
  O_D, O_E, O_R              +options, --offload-activations (offload.py): the bytes one held dense and MoE layer
                             micro-batch offloads, and those the rank keeps anyway
  Q_D, Q_E, Q_H              +options, --linear-recipe (quantized.py): what one held dense and MoE layer
                             micro-batch and the head part change by
  activations_held           ``given``: the activations held before the resident layer's (--virtual-layers)

Outputs: ``activations_per_microbatch`` (``act.stage``), ``activations`` (that, or ``act.peak`` = sum_c n_fl_c x
``act.stage`` at chunk c), ``total`` (Sec. 4-5), the layer split (d act.stage / d L_d, / d L_m: the terms are linear in
the composition) and the Sec. 6 ends. Variants ``mtp<0|1>full<0|1>.<paper|schedule|given>[+options]``."""
from __future__ import annotations

import itertools
from functools import lru_cache
from typing import Dict, List, Tuple

import sympy as sp

from derivations import notation as nt
from derivations.activations import shape as shapes
from derivations.activations import view_terms
from derivations.activations.views import View
from derivations.assembly import overheads
from derivations.config import Conventions
from derivations.config.layout import COMPOSITION, composition_names

#: The symbol of each kind by its role: a family's attention kind (DeepSeek's mla) is M_A.
ROLE_SYMBOLS = {"moe": "M_E", "dense": "M_D", "head": "M_H", "mtp": "M_MTP"}


def kinds_of(shape=True) -> Dict[str, str]:
    """{kind: symbol} of ``shape``'s family: its attention kind M_A, the others by role."""
    fam = shapes.family(shape)
    return {k: ("M_A" if k == fam.attention else ROLE_SYMBOLS.get(k, "M_" + k.upper())) for k in fam.kinds}


#: DeepSeek's activation kinds and the symbol each one's bytes stand as (the page's M^A, M^E, ... of Table 10).
KINDS = kinds_of(True)
#: Chunks a device runs under a schedule: at most two (DualPipe's own and mirror stage; interleaved's
#: layers and head), derivations/assembly/schedules.py.
CHUNKS = 2
STATES = ("weights", "gradients", "optimizer")
HOLDS = ("paper", "schedule", "given")
ENDS = ("low", "high")
S = lambda name: sp.Symbol(name, nonnegative=True)  # noqa: E731  (the assembly's inputs and names)


def variants(options: bool = False) -> List[Tuple[str, bool, bool, str]]:
    """(key, mtp, full, holds) of every variant, without or with the options' terms (key ``...+options``)."""
    return [(f"mtp{int(mtp)}full{int(full)}.{holds}" + ("+options" if options else ""), mtp, full, holds)
            for mtp, full, holds in itertools.product((False, True), (False, True), HOLDS)]


#: The options' inputs (see the module docstring): offloading's, the linear recipe's, a given hold's.
OFFLOAD, QUANTIZED = ("O_D", "O_E", "O_R"), ("Q_D", "Q_E", "Q_H")


def _options(sym: Dict[str, sp.Symbol]) -> sp.Expr:
    """What the options change one micro-batch of a composition ``sym`` by: each held layer less its offloaded bytes
    plus the recipe's change, the head part by the recipe."""
    return (sym["L_d"] * (S("Q_D") - S("O_D")) + sym["L_m"] * (S("Q_E") - S("O_E"))
            + sym["e_H"] * S("Q_H"))


def _in_kinds(term, by_id: Dict, kind_of: Dict[str, sp.Symbol]):
    """``term`` with each activation kind's term replaced by its symbol (through 'ref:' rows)."""
    if term.id in kind_of:
        return kind_of[term.id]
    out = sp.Integer(0)
    for part in term.parts:
        (ref,) = [t[4:] for t in part.tags if t.startswith("ref:")]
        coef = part.num[0] if len(part.num) == 2 else 1
        out += sp.sympify(coef) * _in_kinds(by_id[ref], by_id, kind_of)
    return out


@lru_cache(maxsize=None)
def activation_terms(mtp: bool, full: bool, shape=True) -> Dict[str, sp.Expr]:
    """{'stage', 'peak', 'layer': ``act.stage``, ``act.peak``, ``act.layer`` in the kinds' symbols}."""
    view = View("full" if full else "none", conv=Conventions(mtp_activations="last-stage" if mtp else "none"))
    terms = view_terms(view, shape)
    by_id = {t.id: t for t in terms.values()}
    kind_of = {terms[k].id: S(s) for k, s in kinds_of(shape).items() if k in terms}
    return {k: _in_kinds(terms[k], by_id, kind_of) for k in ("stage", "peak", "layer")}


def assembly(mtp: bool, full: bool, holds: str, shape=True, options: bool = False) -> List[Tuple[str, sp.Expr]]:
    """[(name, expression), ...] of one variant in evaluation order, with the options' terms when ``options``."""
    t = activation_terms(mtp, full, shape)
    names = composition_names(shapes.family(shape).name)  # L_d, L_m, e_E, e_H and the family's counts
    own = {k: nt.SYMBOLS[k] for k in COMPOSITION}
    if holds == "paper" and options:  # one micro-batch: act.stage, changed by the options
        out = [("activations_per_microbatch", t["stage"]),
               ("activations", S("activations_per_microbatch") + _options(own) + S("O_R")), ("total", None)]
    elif holds == "paper":  # one micro-batch: act.stage
        out = [("activations", t["stage"]), ("total", None), ("activations_per_microbatch", S("activations"))]
    elif holds == "schedule":  # act.peak = n_fl x act.stage, at each chunk's composition and in-flight count
        peak = sp.Integer(0)
        for c in range(CHUNKS):
            sym = {k: S(f"{k}_{c}") for k in (*names, "n_fl")}  # chunk c's composition and in-flight count
            peak += t["peak"].xreplace({nt.n_fl: sym["n_fl"], **{nt.SYMBOLS[k]: sym[k] for k in names}})
            if options:  # each of the chunk's n_fl micro-batches changed by the options
                peak += sym["n_fl"] * _options(sym)
        out = [("activations", peak + (S("O_R") if options else 0)), ("total", None),
               ("activations_per_microbatch", t["stage"])]
    elif holds == "given" and options:
        out = [("activations", S("activations_held") + S("O_R")), ("total", None),
               ("activations_per_microbatch", t["stage"])]
    elif holds == "given":
        out = [("total", None), ("activations_per_microbatch", t["stage"])]
    else:
        raise ValueError(holds)
    total = sum((S(k) for k in STATES), sp.Integer(0)) + S("activations") + S("runtime")
    out = [(name, total if name == "total" else expr) for name, expr in out]  # first: what the stage search needs
    out.append(("activations_per_layer", t["layer"]))
    dense, moe = sp.diff(t["stage"], nt.L_d), sp.diff(t["stage"], nt.L_m)
    out += [("activations_dense_layer", dense), ("activations_moe_layer", moe)]
    # a family's own counts: what one layer with the feature adds (DeepSeek-V4's CSA layer: activations_L_C_layer)
    own = [(k, sp.diff(t["stage"], nt.SYMBOLS[k])) for k in names[len(COMPOSITION):]]
    own = [(k, d) for k, d in own if d != 0]  # a count the activations do not read (DeepSeek's L_I, V4's L_R)
    out += [(f"activations_{k}_layer", d) for k, d in own]
    out.append(("activations_outside_layers", S("activations_per_microbatch") - nt.L_d * S("activations_dense_layer")
                - nt.L_m * S("activations_moe_layer") - sum((nt.SYMBOLS[k] * S(f"activations_{k}_layer")
                                                             for k, _ in own), sp.Integer(0))))
    for end in ENDS:  # Sec. 6 at the ends of its ranges
        o = overheads.named_values(end)
        f, buf = sp.Rational(o["f_frag"]), sp.Rational(o["M_buf"])
        out += [(f"fragmentation_{end}", f * S("total")), (f"peak_{end}", overheads.peak(S("total"), f, buf))]
    return out


def inputs() -> Tuple[str, ...]:
    """Every input symbol's name."""
    names = set()
    for options in (False, True):
        for key, mtp, full, holds in variants(options):
            done = set()
            for name, expr in assembly(mtp, full, holds, options=options):
                names |= {s.name for s in expr.free_symbols} - done
                done.add(name)
    return tuple(sorted(names))
