"""Issue 73, items 7 and 8: the H1 and H2 verdicts follow the rules of notebook 03b (embryo.runs.verdicts), read on the
committed databases where the old verdicts said more than their numbers."""
import numpy as np
import pandas as pd

from embryo.analyses import probing as PR
from embryo.analyses import reconstruction as RC
from embryo.runs.results import binomial_se, done_steps

from conftest import ROOT

FIG = ROOT / "figures"


def test_h1_no_class_is_aged_at_a_step_under_its_floor():
    """Item 8: on the mature run, determiners in mask prediction were aged at step 1,050, where they scored 0.374 under
    their most-frequent-token floor of 0.50. Every age in the learning-order table lies at a step where the class is
    above its floor, and is the first such step at half of its rise above it."""
    run = FIG / "mature" / "run"
    table, _ = RC.learning_order(run)
    fl = RC.floors(run, "pos")
    checked = 0
    for task in ("reconstruction", "mask_prediction"):
        t = RC.curves(run, task, "pos")
        ages = table[[c for c in table if c.startswith(task) and c.endswith("step")][0]].dropna()
        for g, step in ages.items():
            v, f = t[g].dropna(), fl.get(g, 0.0)
            base = max(f, v.iloc[0])
            assert v.loc[step] > f, (task, g, step, v.loc[step], f)
            assert v.loc[step] - base >= (v.iloc[-1] - base) / 2, (task, g, step)
            assert (v.loc[:step].iloc[:-1] - base < (v.iloc[-1] - base) / 2).all(), (task, g, step)
            checked += 1
    assert checked >= 10 and ages.get("determiner") == 8000, (checked, ages)


def test_h1_mask_prediction_order_reverses_above_the_floor():
    "Item 8: measured above the floor, content words reach half their rise first on the mature run, beyond the grid."
    _, v = RC.learning_order(FIG / "mature" / "run")
    line = next(l for l in v.splitlines() if l.startswith("Mask prediction"))
    assert "is not reproduced" in line and "content words first" in line, line


def test_h2_counts_a_task_as_learned_only_where_it_ends_above_its_floor():
    """Item 7: on the ELECTRA twin of the mature run, 4 of 5 probes never clear their floor and the one kept
    (dep_silver) peaks at 0.58 but ends at 0.21 under its 0.52 floor: nothing is learned, so H2 is not testable."""
    run = FIG / "electra-tiny-mature" / "run"
    df = PR.probing_results(run)
    L, fl = int(df[df.layer >= 0].layer.max()), PR.floors(df)
    y = PR.layer_curves(df, "dep_silver")[L].dropna()
    assert y.max() > fl["dep_silver"] > y.iloc[-1]  # the case: above the floor at its peak, under it at its end
    v = PR.verdict(run)
    assert "not testable" in v.split(". On ")[0] and "is reproduced" not in v, v


def test_h2_every_kept_task_ends_above_its_floor_and_its_plateau_is_tested():
    "Item 7: on every committed run, each task the H2 verdict keeps ends above its floor by 2 SE; 'plateau' is a test."
    for run in sorted(FIG.glob("**/run/results.sqlite")):
        if not done_steps(run.parent, "probing"): continue
        df = PR.probing_results(run.parent)
        L, last, fl = int(df[df.layer >= 0].layer.max()), int(df.step.max()), PR.floors(df)
        v = PR.verdict(run.parent)
        head = v.split(". On ")[0]
        for t in fl.index:
            y = PR.layer_curves(df, t)[L].dropna()
            n = df[(df.task == t) & (df.metric == "f1") & (df.layer == L) & (df.step == last)].n.iloc[0]
            above = y.iloc[-1] - 2 * binomial_se(y.iloc[-1], n) > fl[t]
            kept = f"({t})" in head
            assert not kept or above, (run, t, y.iloc[-1], fl[t], head)
        assert "and plateaus after it" not in v, v  # the old fixed phrase
        assert " a plateau" in v.split(". On ")[1] or "no plateau" in v.split(". On ")[1] or "not test" in v, v


def test_table6_is_not_testable_where_the_paper_lies_inside_our_interval():
    """Issue 73, item 9: the committed Table 6 said 'not reproduced', though the NSP-trained model reaches only 59.6 on
    NSP (paper 90.5) and the SOP-trained 61.1 on SOP (paper 86.5), and the paper's 52.0 (the NSP model's SOP) lies
    inside our 55.3 +- 4.4. Rule 5 of 03b: such a claim is not testable."""
    import json
    from embryo.runs import verdicts as V
    from embryo.publish.report import status_of
    # rule 5 on the committed numbers (percent; 2 seeds x 256 pairs)
    se = lambda p: 100 * binomial_se(p / 100, 512)
    assert V.readable(55.3, se(55.3), paper=52.0, floor=50) is not None  # the paper's value inside our interval
    assert V.readable(59.6, se(59.6), paper=90.5, floor=50) is not None  # learned, but to a quarter of the paper's rise
    assert V.readable(85.0, se(85.0), paper=90.5, floor=50) is None  # learned to most of the paper's level, apart from it
    v = json.loads((FIG / "report.json").read_text())
    v = next(s["verdict"] for s in v["sections"] if s["file"] == "table6_sentence_loss")
    assert status_of(v) == "not testable" and "not testable at this scale" in v, v
    # since the rows were rescored on 1,003 pairs and read against the length rule, the committed table's own tasks are
    # learned too weakly to read (rule 5 against the floor, not 50)
    assert "the length rule scores SOP" in v and "learned too weakly to read" in v, v


def test_fig7_needs_half_steps_apart_beyond_the_grid_spacing():
    """Issue 73, item 9: Fig. 7 said 'reproduced' whenever two half-steps differed, e.g. mask prediction on the default
    run: base and past at step 5,000, 3rd singular at 5,500 (adjacent evaluated steps 500 apart). An order claim needs
    two forms' half-rise intervals apart by more than one grid step (rule 4 with `gap`)."""
    from embryo.runs.verdicts import Rise, order
    assert order(Rise(5000, 4500), Rise(5500, 5000)) == -1  # adjacent intervals: in order by rule 4 alone
    assert order(Rise(5000, 4500), Rise(5500, 5000), gap=True) == 0  # but one grid step apart: a tie
    assert order(Rise(128, 64), Rise(1000, 500), gap=True) == -1 and order(Rise(1000, 500), Rise(128, 64), gap=True) == 1
    v = RC.verdicts(FIG / "run")["fig7_verb_forms"].splitlines()
    mp = next(l for l in v if l.startswith("Mask prediction"))
    assert "reproduced" not in mp and "not testable at this checkpoint spacing" in mp, mp
    # reconstruction on the refreshed run: 3rd singular in (16, 128], the other forms in (128, 2000], adjacent evaluated
    # intervals: not one grid step apart, so no order is read (the old run's (64, 128] against (500, 1000] was)
    rec = next(l for l in v if l.startswith("Reconstruction"))
    assert "3rd singular at step 128" in rec and "not testable at this checkpoint spacing" in rec, rec
    # the mature run: every form of reconstruction in (128, 1050]: a tie, not 'not shown'
    m = RC.verdicts(FIG / "mature" / "run")["fig7_verb_forms"].splitlines()[0]
    assert m.startswith("Reconstruction") and "not testable at this checkpoint spacing" in m, m


def test_compare_names_each_runs_floor_and_rises_only_above_it():
    """Issue 73, item 9: the side-by-side verdicts named no floor for knowledge, probing or attention, and the mature
    ALBERT's world-knowledge P@1 'rose' to 0.053 against a constant answer (each relation's most frequent answer) that
    scores 0.220. Every run of every verdict names the floor it is judged against, and rises only where its end clears
    that floor."""
    import json
    from embryo.experiments import compare as C
    from embryo.analyses import knowledge as K
    runs = json.loads((FIG / "compare-mature" / "compare.json").read_text())["runs"]
    assert abs(K.constant_floor(ROOT / runs[0]).floor.mean() - 0.220) < 0.001
    names = C.FLOORS
    assert {"reconstruction", "glue", "knowledge", "probing", "attention"} <= set(names)
    for d in ("compare", "compare-mature"):
        rep = json.loads((FIG / d / "compare.json").read_text())["analyses"]
        for a, r in rep.items():
            for n, t in r["runs"].items():
                assert t["floor"] is not None, (d, a, n)
                if a != "glue":  # downstream: judged per task below (issue 75), not the mean against a mean floor
                    assert f"floor {t['floor']:.3f}" in r["verdict"] and C.FLOORS[a][0] in r["verdict"], (d, a, r["verdict"])
                assert not t["rises"] or t["last"] > t["floor"] + C.RISE, (d, a, n, t)
            for n, per in r.get("tasks", {}).items():  # each task against its own floor, or said to have none stored
                for task, t in per.items():
                    assert (t is None and "no floor stored" in r["verdict"]) or not t["rises"] or t["last"] > t["floor"] + C.RISE, (d, task, n, t)
    k = json.loads((FIG / "compare-mature" / "compare.json").read_text())["analyses"]["knowledge"]
    assert not k["runs"]["ALBERT (tiny-mature)"]["rises"] and "generalise" in k["verdict"], k["verdict"]


def test_h1_order_needs_the_intervals_a_whole_evaluated_step_apart():
    """Issue 73: Fig. 1's 'function words are learned before content words' said reproduced on the default and the
    ELECTRA run's reconstruction, where the function words' mean half-rise interval ends (252, 376) and the content
    words' begins (277, 426) inside the same evaluated interval (128, 500]: not one evaluated step apart. Rule 4 as for
    Fig. 7: the order is read only where the intervals lie at least one whole evaluated step apart; the default run's
    mask prediction ((4000, 4500] against (5000, 5500]) still is."""
    from embryo.publish.report import status_of
    for run in ("run", "electra-tiny/run"):
        rec = next(l for l in RC.verdict(FIG / run).splitlines() if l.startswith("Reconstruction"))
        assert "not testable at this checkpoint spacing" in rec and "is reproduced" not in rec, rec
        assert status_of(rec) == "not testable", rec
    # the refreshed run's mask prediction: function words (4000, 4500] against content words (4500, 5000], adjacent
    # intervals (the old run's (4000, 4500] against (5000, 5500] were a whole step apart, and reproduced)
    mp = next(l for l in RC.verdict(FIG / "run").splitlines() if l.startswith("Mask prediction"))
    assert "0.0 of an evaluated step apart" in mp and "is reproduced" not in mp, mp
    from embryo.runs.verdicts import Rise, apart, order
    grid = [64, 128, 500, 1000]
    assert order(Rise(252, 85), Rise(700, 277)) == -1  # rule 4 alone: the intervals do not overlap
    assert apart(Rise(252, 85), Rise(700, 277), grid) < 1 and order(Rise(252, 85), Rise(700, 277), steps=grid) == 0


def test_compare_step90_is_90_percent_of_the_rise_to_the_end():
    """Issue 73: compare's '90% of the gain' step was measured toward the best value over the steps, so a peak the run
    falls back from set it (a maximum read as learned). It is the first step at 90% of the rise from the first value
    (or the floor, where higher, as rule 2) to the last one; no gain where the end does not clear them."""
    import json
    import math
    from embryo.experiments import compare as C
    from pathlib import Path
    from embryo.runs.results import read_results
    from embryo.runs.run import read_run_config
    t = C.trend(pd.Series([0.10, 0.30, 0.38, 0.60, 0.40], index=[0, 10, 50, 800, 1000]), 1000)
    assert t["step90"] == 50 and abs(t["gain"] - 0.30) < 1e-9 and t["best"] == 0.60, t  # to the best: step 800
    t = C.trend(pd.Series([0.10, 0.50, 0.25], index=[0, 10, 1000]), 1000, floor=0.3)
    assert t["step90"] is None and t["share90"] is None and not t["rises"], t
    checked = 0
    for d in ("compare", "compare-mature"):
        rep = json.loads((FIG / d / "compare.json").read_text())
        names = {f"{C.model_family(ROOT / r)} ({read_run_config(ROOT / r).preset if Path(r).name == C.RUN_BUNDLE else Path(r).name})": r
                 for r in rep["runs"]}
        for a, r in rep["analyses"].items():
            for n, t in r["runs"].items():
                s = C.SIDE_BY_SIDE[a][2](read_results(ROOT / names[n], a)).sort_index().dropna()
                base = max(s.iloc[0], t["floor"] if t["floor"] is not None else -math.inf)
                rise = s.iloc[-1] - base
                assert abs(t["gain"] - (s.iloc[-1] - s.iloc[0])) < 1e-9, (d, a, n, t)
                if rise <= 0:
                    assert t["step90"] is None and ("no gain" in r["verdict"] or a == "glue"), (d, a, n, t)
                else:
                    first = next(k for k, v in s.items() if v - base >= 0.9 * rise)
                    assert t["step90"] == first, (d, a, n, t["step90"], first)
                checked += 1
    assert checked >= 20, checked


def test_h3_judges_where_the_curve_ends_not_its_best_step(monkeypatch):
    """Issue 73, H3: the downstream verdict took the best step for its floor check and its gain, so a curve that peaks
    above the bag-of-words floor and falls back under it read as 'most downstream ability early'. By rule 1 it is
    judged at its last step; by rule 2 its 90% step is read on the rise to the last step above the floor."""
    from embryo.analyses import glue as G
    from embryo.publish.report import status_of
    steps = [0, 1000, 2000, 4000, 8000]
    def fake(curve, floor=59.3):  # one task, sentence polarity, with its own bag-of-words floor (issue 75: per task)
        monkeypatch.setattr(G, "scores_table", lambda run: pd.DataFrame({"polarity": curve, "builtin": curve}, index=steps))
        monkeypatch.setattr(G, "seed_scores", lambda run, agg: pd.DataFrame())
        monkeypatch.setattr(G, "_floor", lambda run, kind="chance": pd.Series(
            {"polarity": floor if kind == "bow" else 50.0, "builtin": floor if kind == "bow" else 50.0}
            if kind != "ngram" else {}, dtype=float))
        return G.verdict("any")
    peak = fake([55.0, 70.0, 69.0, 64.0, 58.0])
    assert status_of(peak) == "not testable" and "not above its floor" in peak, peak
    late = fake([55.0, 56.0, 60.0, 62.0, 70.0])  # 90% of 70 - 59.3 above the floor: only at the last step
    assert "by step 8,000" in late and status_of(late) == "not reproduced", late
    # issue 75: early only where the share at half the run holds 90% of the gain even at its interval's low end; one
    # finetuning seed counts as a standard error of 1 point at each step, so an 11-point gain cannot place it
    unsure = fake([55.0, 69.5, 70.0, 70.0, 70.5])
    assert "by step 1,000" in unsure and "it has 96%" in unsure and status_of(unsure) == "not testable", unsure
    early = fake([55.0, 94.5, 95.0, 95.0, 95.0])
    assert "by step 1,000" in early and "(92-108%" in early and status_of(early) == "reproduced", early


def test_fig4_emergence_is_half_the_rise_above_an_even_spread_to_the_end():
    """Issue 73, rule 2 on Fig. 4: emergence_step took half of the rise from the first value to the curve's PEAK. On the
    mature run layer 4's most diagonal head peaks at 0.650 and ends at 0.402: half of its rise above an even spread to
    the end is reached at step 1,150 (it read 1,250), where layer 2 also is, so the paper's order is a tie at this
    spacing ('not testable'), not 'not reproduced'. On the ELECTRA twin layer 3's head peaks at 0.172 but ends at 0.120,
    under an even spread's 0.122: by rule 1 no pattern emerges (it read step 650)."""
    from embryo.analyses import attention as A
    from embryo.publish.report import status_of
    run = FIG / "mature" / "run"
    t, u = A.emergence_table(run), A.run_floors(run)["diagonal"]
    h = A.head_metrics(run)
    d = h[h.metric == "diagonal"].pivot_table(index="step", columns=["layer", "head"], values="value").sort_index()
    for layer, r in t.iterrows():  # each emergence step: the first at half of the rise above the base to the end
        c = d[(layer, int(r["head"]))]
        base = max(u, c.iloc[0]); half = base + (c.iloc[-1] - base) / 2
        assert c.loc[r["emergence step"]] >= half and (c.loc[:r["emergence step"]].iloc[:-1] < half).all(), layer
    assert t.loc[4, "emergence step"] == t.loc[2, "emergence step"] == 1150, t["emergence step"]
    v = A.verdict(run)
    assert status_of(v) == "not testable" and "layers 4 and 2 reach half their rise without a whole evaluated step" in v.lower(), v
    e = A.emergence_table(FIG / "electra-tiny-mature" / "run")
    assert e.loc[3, "diagonal, peak"] > 0.17 and e.loc[3, "diagonal, last step"] < A.run_floors(run)["diagonal"]
    assert np.isnan(e.loc[3, "emergence step"]), e["emergence step"]


def test_similarity_orders_layers_only_a_whole_evaluated_step_apart():
    """Issue 73, rule 4 on the settle order: on the mature run layers 0 and 1 settle (CKA to the final checkpoint >= 0.9
    from then on) at step 5,250 and layers 2-4 only at the last step, 8,000, the next evaluated step: no evaluated step
    lies between, so 'Lower layers settle first, the bottom-up convergence...' said more than the grid allows."""
    from embryo.analyses import similarity as S
    from embryo.publish.report import status_of
    run = FIG / "mature" / "run"
    ck = S.curves(S.similarity_results(run), "cka_final")
    steps = list(ck.index)
    assert S.settle_steps(ck) == {0: 5250.0, 1: 5250.0, 2: 8000.0, 3: 8000.0, 4: 8000.0}
    assert steps.index(8000) - steps.index(5250) == 1  # adjacent on the grid
    v = S.verdict(run)
    assert not v.startswith("Lower layers settle first") and status_of(v) == "not testable", v
    assert S.settle_order({0: 4750.0, 1: 6250.0, 2: 7250.0}, range(0, 8001, 250)) == "lower"  # steps apart: an order


def test_syntax_clears_the_adjacent_baseline_only_by_two_standard_errors():
    """Issue 73, rule 1 on the syntax verdict: 'it first exceeds the adjacent-word baseline at step 2000' read the raw
    UAS of the best head on the mature run (0.482 against 0.475 on 10,391 words, under 2 binomial standard errors of
    0.005; it fell back under the baseline at 2,100). The first step where it clears it by two standard errors is 4,250."""
    from embryo.analyses import syntax as SY
    run = FIG / "mature" / "run"
    t = SY.best_curves(run)
    n = SY.syntax_results(run).query("metric == 'uas_best'").groupby("step").n.max()
    clears = t.best - 2 * binomial_se(t.best, n.reindex(t.index)) > t.adjacent
    assert (t.best > t.adjacent).idxmax() == 2000 and clears.idxmax() == 4250, (t.best - t.adjacent)
    v = SY.verdict(run)
    assert "It first clears the adjacent-word baseline (0.475) by 2 standard errors at step 4250" in v, v
    assert "At step 8000 it beats that baseline by 2 standard errors (0.503" in v, v


def test_knowledge_forgotten_needs_the_drop_beyond_the_difference_of_two_errors(monkeypatch):
    """Issue 73 on 'learned then forgotten' (06): the verdict compared a relation's MAXIMUM over steps with its last
    value, by two standard errors of the peak alone. A peak of 0.40 falling to 0.30 on 100 queries is 0.10, two of the
    peak's errors (0.049) but not two of the difference's (0.067): the old verdict read it as the paper's forgetting.
    A peak under its floor by rule 1 is no learned knowledge to forget either."""
    from embryo.analyses import knowledge as K
    steps = [0, 1000, 2000, 4000]
    def fake(curves, floors):
        rows = [dict(step=s, task=r, metric=m, value=v[i], n=100) for r, v in curves.items() for i, s in enumerate(steps)
                for m in K.METRICS]
        monkeypatch.setattr(K, "knowledge_results", lambda run: pd.DataFrame(rows))
        monkeypatch.setattr(K, "constant_floor", lambda run: pd.DataFrame({"floor": floors}))
        return K.verdict("any")
    v = fake({"P19": [0.0, 0.40, 0.33, 0.30]}, {"P19": 0.10})
    assert "1 of 1 relations (P19) clear their floor at some step" in v and "0 of them (none)" in v, v
    assert "knowledge is forgotten" not in v, v
    v = fake({"P19": [0.0, 0.40, 0.30, 0.20]}, {"P19": 0.10})  # 0.20 down: beyond 2 x 0.063
    assert "1 of them (P19)" in v and "knowledge is forgotten" in v, v


def test_exposure_group_is_learned_only_where_it_clears_the_control_at_the_end(monkeypatch):
    """Issue 73, rule 1 on H4 (06a): an exposure group counted as learned where it cleared the never-shown control at
    any two evaluated steps in a row, so a group above it at steps 1,000 and 2,000 that fell back to the control by the
    end read as 'learned'. It is learned only where it clears the control at the last two evaluated steps."""
    from embryo.analyses import exposure as E
    from embryo.publish.report import status_of
    steps = [0, 1000, 2000, 4000, 8000]
    def fake(shown):
        p = pd.DataFrame({0: [0.02] * 5, 64: shown}, index=steps)
        n = pd.DataFrame({0: [400] * 5, 64: [400] * 5}, index=steps)
        monkeypatch.setattr(E, "read_facts", lambda run: [None] * 800)
        monkeypatch.setattr(E, "fact_table", lambda run: pd.DataFrame({"step": steps, "constant": [0.1] * 5}))
        monkeypatch.setattr(E, "group_curves", lambda ft, constant=True: (p, n))
        monkeypatch.setattr(E, "per_relation", lambda ft: "Per relation (Fig. 14): not read here")  # the pooled rule
        monkeypatch.setattr(E, "categories", lambda ft: pd.DataFrame(
            {"exposures": [0] * 10 + [64] * 10, "category": ["oscillating"] * 10 + ["learned and kept"] * 10}))
        return E.verdict("any")
    early = fake([0.02, 0.20, 0.25, 0.03, 0.02])
    assert "No exposure group clears" in early and status_of(early) == "not testable", early
    kept = fake([0.02, 0.20, 0.25, 0.30, 0.30])
    assert "Facts shown 64x are learned" in kept and status_of(kept) != "not testable", kept
