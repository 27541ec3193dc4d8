"""The exact causal engine on hand-built models with hand-worked values (exact fractions).

Every CLadder graph and query type appears; each expected value is worked out by hand in the
comment beside it. Fractions in, fractions out: the engine adds and multiplies only.
"""

from __future__ import annotations

import random
from fractions import Fraction as F

import pytest

from crawdad.causal import BinaryModel, verdict
from crawdad.causal.queries import QUANTITY, backdoor_valid
from crawdad.errors import DataError

H, Q, T = F(1, 2), F(1, 4), F(3, 4)


def model(**tables):
    return BinaryModel.from_tables({v: (ps, t) for v, (ps, t) in tables.items()})


CHAIN = model(X=((), H), V2=(("X",), [Q, T]), Y=(("V2",), [F(1, 5), F(3, 5)]))
FORK = model(X=((), H), V2=((), Q), Y=(("X", "V2"), [[0, H], [H, 1]]))
COLLISION = model(X=((), H), Y=((), H), V3=(("X", "Y"), [[0, H], [H, 1]]))
CONFOUNDING = model(V1=((), H), X=(("V1",), [Q, T]), Y=(("V1", "X"), [[0, H], [H, 1]]))
MEDIATION = model(X=((), H), V2=(("X",), [Q, T]), Y=(("X", "V2"), [[0, H], [H, 1]]))
IV = model(
    V1=((), H), V2=((), H), X=(("V1", "V2"), [[0, H], [H, 1]]), Y=(("V1", "X"), [[0, H], [H, 1]])
)
# Y = X/4 + (1/2 if V2 == V3): the mediator V3 shares the confounder V2 with Y.
ARROWHEAD = model(
    X=((), H),
    V2=((), H),
    V3=(("X", "V2"), [[0, H], [H, 1]]),
    Y=(("X", "V2", "V3"), [[[H, 0], [0, H]], [[T, Q], [Q, T]]]),
)
DIAMOND = model(
    X=((), H), V2=(("X",), [0, 1]), V3=(("X",), [H, H]), Y=(("V2", "V3"), [[0, H], [H, 1]])
)
DIAMONDCUT = model(
    V1=((), H), V3=(("V1",), [Q, T]), X=(("V1",), [Q, T]), Y=(("X", "V3"), [[0, H], [H, 1]])
)
FRONTDOOR = model(
    V1=((), H), X=(("V1",), [Q, T]), V3=(("X",), [0, 1]), Y=(("V1", "V3"), [[0, H], [H, 1]])
)


def q(kind, m, **meta):
    return QUANTITY[kind](m, {"treatment": "X", "outcome": "Y", **meta})


# (graph, query, meta, exact value, answer with polarity true)
CASES = [
    # chain: P(V2=1) = 1/2, P(Y) = 1/2*1/5 + 1/2*3/5 = 2/5
    ("chain", CHAIN, "marginal", {}, F(2, 5), "no"),
    # P(Y|X=1) = 1/4*1/5 + 3/4*3/5 = 1/2, P(Y|X=0) = 3/4*1/5 + 1/4*3/5 = 3/10
    ("chain", CHAIN, "correlation", {}, F(1, 5), "yes"),
    ("chain", CHAIN, "ate", {}, F(1, 5), "yes"),
    ("chain", CHAIN, "ett", {}, F(1, 5), "no"),  # "more likely had X been 0?" no
    ("chain", CHAIN, "nie", {"mediators": ["V2"]}, F(1, 5), "yes"),  # all of it via V2
    # fork: ATE = 3/4*(1/2 - 0) + 1/4*(1 - 1/2) = 1/2, X independent of V2 so corr = ATE
    ("fork", FORK, "ate", {}, H, "yes"),
    ("fork", FORK, "correlation", {}, H, "yes"),
    ("fork", FORK, "ett", {}, H, "no"),
    ("fork", FORK, "marginal", {}, F(3, 8), "no"),  # (P(Y|X=0) + P(Y|X=1)) / 2 = (1/8 + 5/8) / 2
    # collision, V3=1: joint (x,y) 0,1: 1/8; 1,0: 1/8; 1,1: 1/4. P(Y|V3)=3/4, P(Y|X,V3)=2/3
    ("collision", COLLISION, "exp_away", {"collider": "V3"}, F(-1, 12), "no"),
    ("collision", COLLISION, "collider_bias", {"collider": "V3"}, 0, "no"),
    ("collision", COLLISION, "correlation", {}, 0, "no"),  # independent: neither more nor less
    ("collision", COLLISION, "marginal", {}, H, "no"),  # exactly 1/2: not more likely
    # confounding: ATE = 1/2*1/2 + 1/2*1/2; P(Y|X=1) = 3/4*1 + 1/4*1/2, P(Y|X=0) = 1/4*1/2
    ("confounding", CONFOUNDING, "ate", {}, H, "yes"),
    ("confounding", CONFOUNDING, "correlation", {}, T, "yes"),
    ("confounding", CONFOUNDING, "ett", {}, H, "no"),
    # mediation: NDE = 3/4*(1/2-0) + 1/4*(1-1/2) = 1/2; NIE = 1/2*(3/4-1/4) + 0 = 1/4
    ("mediation", MEDIATION, "nde", {"mediators": ["V2"]}, H, "yes"),
    ("mediation", MEDIATION, "nie", {"mediators": ["V2"]}, Q, "yes"),
    ("mediation", MEDIATION, "ate", {}, T, "yes"),  # P(Y|X=1) = 7/8, P(Y|X=0) = 1/8
    ("mediation", MEDIATION, "marginal", {}, H, "no"),
    # IV: ATE = sum_v1 P(v1) (P(Y|v1,1) - P(Y|v1,0)) = 1/2
    ("IV", IV, "ate", {}, H, "yes"),
    # arrowhead: E[Y_x] = x/4 + P(V2 == V3 | do x) = x/4 + 3/8
    ("arrowhead", ARROWHEAD, "ate", {}, Q, "yes"),
    ("arrowhead", ARROWHEAD, "nde", {"mediators": ["V3"]}, Q, "yes"),
    # NIE: v2=0 gives 1/2*(-1/2) = -1/4, v2=1 gives 1/2*(1/2) = 1/4: 0 in all. (Setting V3 to an
    # independent coin P(V3|do X=1) = 3/4, as CLadder's generator does, would give -1/8.)
    ("arrowhead", ARROWHEAD, "nie", {"mediators": ["V3"]}, 0, "no"),
    # diamond: do(1): V2=1, E[Y] = 3/4; do(0): V2=0, E[Y] = 1/4; no direct path, NIE = ATE
    ("diamond", DIAMOND, "ate", {}, H, "yes"),
    ("diamond", DIAMOND, "nie", {"mediators": ["V2", "V3"]}, H, "yes"),
    ("diamond", DIAMOND, "ett", {}, H, "no"),
    # diamondcut: E[Y|do x] = x/2 + P(V3=1)/2, ETT = 1/2 too (every X difference is 1/2)
    ("diamondcut", DIAMONDCUT, "ate", {}, H, "yes"),
    ("diamondcut", DIAMONDCUT, "ett", {}, H, "no"),
    # frontdoor: V3 = X; E[Y|do 0] = 1/4, E[Y|do 1] = 3/4; NIE = E[Y_{0,V3=1}] - 1/4 = 1/2
    ("frontdoor", FRONTDOOR, "ate", {}, H, "yes"),
    ("frontdoor", FRONTDOOR, "nie", {"mediators": ["V3"]}, H, "yes"),
    ("frontdoor", FRONTDOOR, "ett", {}, H, "no"),
]


@pytest.mark.parametrize(("graph", "m", "kind", "meta", "value", "answer"), CASES)
def test_hand_worked_values_and_answers(graph, m, kind, meta, value, answer):
    got = q(kind, m, **meta)
    assert got == value and isinstance(got, F | int), f"{graph} {kind}: {got} != {value}"
    assert verdict(kind, got, {**meta, "polarity": True}).answer == answer
    flipped = verdict(kind, got, {**meta, "polarity": False}).answer
    if kind == "collider_bias":
        assert flipped == "yes"  # "does it mean that X does not affect Y?"
    elif got == 0 or (kind == "marginal" and got == H):
        assert flipped == "no"  # neither more nor less: no to both wordings
    else:
        assert flipped == {"yes": "no", "no": "yes"}[answer]


def test_treated_and_result_flags_flip_the_quantity():
    assert q("ate", MEDIATION, treated=False) == -T
    assert q("ett", CONFOUNDING, treated=False) == -H  # E[Y_0 - Y_1 | X=0] = -(1/2)
    assert q("correlation", CHAIN, treated=False) == F(-1, 5)


def test_band_and_its_edge():
    assert verdict("ate", F(4, 1000), {"polarity": True}).answer == "no"  # inside: CLadder says no
    assert verdict("ate", F(-6, 1000), {"polarity": False}).answer == "yes"
    assert verdict("ate", F(5, 1000), {"polarity": True}).answer is None  # on the edge: undecided
    assert verdict("exp_away", F(1, 1000), {"polarity": True}).answer == "yes"  # no band
    assert verdict("marginal", F(1, 1000), {"polarity": False}).answer == "no"  # CLadder's slip


@pytest.mark.parametrize(
    ("m", "sets"),
    [
        (CHAIN, {(): True, ("V2",): False}),
        (FORK, {(): True, ("V2",): True}),  # V2 only causes Y: adjusting is valid too
        (COLLISION, {(): True, ("V3",): False}),
        (CONFOUNDING, {(): False, ("V1",): True}),
        (MEDIATION, {(): True, ("V2",): False}),
        (IV, {(): False, ("V1",): True, ("V2",): False, ("V1", "V2"): True}),
        (ARROWHEAD, {(): True, ("V2",): True, ("V3",): False}),
        (DIAMOND, {(): True, ("V2",): False, ("V3",): False}),
        (DIAMONDCUT, {(): False, ("V1",): True, ("V3",): True, ("V1", "V3"): True}),
        (FRONTDOOR, {(): False, ("V1",): True, ("V3",): False}),
    ],
)
def test_backdoor_criterion(m, sets):
    assert {s: backdoor_valid(m, s) for s in sets} == sets


def test_backadj_answers():
    meta = {"given_info": [["V1"], []], "polarity": True}
    v = QUANTITY["backadj"](CONFOUNDING, meta)
    assert v == (True, False) and verdict("backadj", v, meta).answer == "yes"
    meta = {"given_info": [["V2"], []]}
    fork = QUANTITY["backadj"](FORK, meta)
    # Both valid: CLadder's convention favours the minimal set (Method 2 here), and says so.
    v = verdict("backadj", fork, meta)
    assert fork == (True, True) and v.answer == "no" and "convention" in (v.note or "")
    flipped = {"given_info": [[], ["V2"]]}
    assert verdict("backadj", QUANTITY["backadj"](FORK, flipped), flipped).answer == "yes"


# Deterministic structural equations (CLadder's det-counterfactual questions).
DET_MEDIATION = model(X=((), F(7, 100)), V2=(("X",), [0, 1]), Y=(("X", "V2"), [[0, 1], [1, 1]]))
DET_IV = model(  # X = V1 or V2, Y = V1 or X
    V1=((), H), V2=((), H), X=(("V1", "V2"), [[0, 1], [1, 1]]), Y=(("V1", "X"), [[0, 1], [1, 1]])
)
DET_FORK = model(X=((), H), V2=((), H), Y=(("X", "V2"), [[0, 1], [1, 1]]))  # Y = X or V2


@pytest.mark.parametrize(
    ("m", "meta", "value", "answer"),
    [
        (DET_MEDIATION, {"action": 0, "polarity": 1, "given_info": {}}, 0, "no"),  # Y = 0 or 0
        (DET_MEDIATION, {"action": 0, "polarity": 0, "given_info": {}}, 1, "yes"),
        (DET_MEDIATION, {"action": 1, "polarity": 1, "given_info": {}}, 1, "yes"),
        (DET_IV, {"action": 0, "polarity": 0, "given_info": {"V2": 0, "V1": 1}}, 0, "no"),
        (DET_IV, {"action": 1, "polarity": 1, "given_info": {"V2": 0, "V1": 0}}, 1, "yes"),
        (DET_FORK, {"action": 0, "polarity": 1, "given_info": {"V2": 0}}, 0, "no"),
        (DET_FORK, {"action": 0, "polarity": 1, "given_info": {}}, H, None),  # V2 unknown
    ],
)
def test_det_counterfactual(m, meta, value, answer):
    got = q("det-counterfactual", m, **meta)
    assert got == value
    assert verdict("det-counterfactual", got, meta).answer == answer


def test_counterfactual_with_factual_evidence():
    # Confounding, E[Y_{X=0} | X=1] = sum_v1 P(v1|X=1) P(Y|v1,0) = 3/4*1/2 + 1/4*0 = 3/8
    from crawdad.causal.model import Ref

    assert CONFOUNDING.counterfactual([{}, {"X": 0}], [(1, "Y", 1)], [(0, "X", 1)]) == F(3, 8)
    # A Ref copies a value from an earlier world: Y_{X=1, V2=V2_{X=1}} = Y_{X=1}
    worlds = [{"X": 1}, {"X": 1, "V2": Ref(0, "V2")}]
    assert MEDIATION.counterfactual(worlds, [(1, "Y", 1)]) == F(7, 8)


def test_from_meta_reads_cladder_tables_and_checks_structure():
    raw = {
        "model_id": 5,
        "structure": "X->V2,X->Y,V2->Y",
        "params": {"p(X)": 0.5, "p(V2 | X)": [0.25, 0.75], "p(Y | X, V2)": [[0, 0.5], [0.5, 1]]},
    }
    m = BinaryModel.from_meta(raw)
    assert m.order == ("X", "V2", "Y") and m.parents["Y"] == ("X", "V2")
    assert m.tables["Y"][(0, 1)] == 0.5  # nested in the order of the parents in the key
    with pytest.raises(DataError, match=r"causal model 5: `structure`"):
        BinaryModel.from_meta({**raw, "structure": "X->Y,V2->Y"})
    with pytest.raises(DataError, match=r"p\(Y\): table entry \[1, 1\] is 1.5"):
        BinaryModel.from_meta(
            {**raw, "params": {**raw["params"], "p(Y | X, V2)": [[0, 0.5], [0.5, 1.5]]}}
        )
    with pytest.raises(DataError, match="nested 2 deep"):
        BinaryModel.from_meta({**raw, "params": {**raw["params"], "p(Y | X, V2)": [0.1, 0.2]}})


GRAPHS = {
    "chain": "X->V2,V2->Y",
    "fork": "X->Y,V2->Y",
    "collision": "X->V3,Y->V3",
    "confounding": "V1->X,V1->Y,X->Y",
    "mediation": "X->V2,X->Y,V2->Y",
    "IV": "V1->X,V2->X,V1->Y,X->Y",
    "arrowhead": "X->V3,V2->V3,X->Y,V2->Y,V3->Y",
    "diamond": "X->V3,X->V2,V2->Y,V3->Y",
    "diamondcut": "V1->V3,V1->X,X->Y,V3->Y",
    "frontdoor": "V1->X,X->V3,V1->Y,V3->Y",
}


def _random_model(structure: str, rng: random.Random) -> BinaryModel:
    parents: dict[str, list[str]] = {}
    for edge in structure.split(","):
        a, b = edge.split("->")
        parents.setdefault(a, [])
        parents.setdefault(b, []).append(a)

    def table(n):
        return round(rng.uniform(0.05, 0.95), 3) if n == 0 else [table(n - 1), table(n - 1)]

    return model(**{v: (tuple(ps), table(len(ps))) for v, ps in parents.items()})


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_against_pgmpy(graph):
    """Observational and interventional probabilities agree with pgmpy's variable elimination."""
    pgmpy = pytest.importorskip("pgmpy")
    del pgmpy
    from pgmpy.factors.discrete import TabularCPD
    from pgmpy.inference import CausalInference, VariableElimination
    from pgmpy.models import DiscreteBayesianNetwork

    m = _random_model(GRAPHS[graph], random.Random(graph))
    net = DiscreteBayesianNetwork([(p, v) for v in m.order for p in m.parents[v]])
    for v in m.order:
        ps = list(m.parents[v])
        keys = sorted(m.tables[v])  # pgmpy: columns in parent-state order, first parent slowest
        ones = [float(m.tables[v][k]) for k in keys]
        net.add_cpds(
            TabularCPD(v, 2, [[1 - p for p in ones], ones], evidence=ps or None,
                       evidence_card=[2] * len(ps) or None)
        )  # fmt: skip
    ve, ci = VariableElimination(net), CausalInference(net)
    others = [v for v in m.order if v not in ("X", "Y")]
    for given in [{}, {"X": 1}, *({"X": 0, o: 1} for o in others)]:
        want = ve.query(["Y"], evidence=given or None, show_progress=False).values[1]
        assert float(m.prob({"Y": 1}, given)) == pytest.approx(want, abs=1e-12)
    for x in (0, 1):
        want = ci.query(["Y"], do={"X": x}, show_progress=False).values[1]
        assert float(m.prob({"Y": 1}, do={"X": x})) == pytest.approx(want, abs=1e-12)
