"""The figures over steps (issue 33, point 8), drawn as `embryo report`, `embryo compare` and `embryo seeds` draw them
from the committed bundles: every measured point a marker and no line across a checkpoint that was saved but not
evaluated, the loss drop named (last) in every figure that marks it, no legend over a measured point, no y label
clipped, and the marks and titles of Figs. 4 and 6 and the similarity figure."""
import re
import shutil
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from embryo.analyses import attention as A
from embryo.runs.figures import TRANSITION_GID, TRANSITION_LABEL
from embryo.experiments.compare import compare_runs
from embryo.publish.report import redraw_all
from embryo.runs.settings import saved_steps
from embryo.runs.run import transitions
from embryo.experiments.seeds import seed_bands
from embryo.analyses.sweep import analysis_module, available_analyses

ROOT = Path(__file__).resolve().parents[1]
# the run's name (as the figures' titles say it) -> its bundle under figures/: the default run, the mature run (a
# checkpoint every 50 steps, a few evaluated: the most gaps) and the facts run (Fig. 6 by exposure)
BUNDLES = {"tiny": "run", "tiny-mature": "mature/run", "tiny-facts": "facts/run"}
# the runs drawn together (all on the default run's checkpoint schedule): `embryo compare`'s and `embryo seeds`' bundles
TOGETHER = {"compare": ["run", "bert-tiny/run", "electra-tiny/run"], "seeds": ["run", "seeds/seed1/run", "seeds/seed2/run"]}
NO_MARKER = (None, "None", "", " ")


def _draw(tmp_path_factory, name: str) -> tuple[dict, np.ndarray]:
    "Every figure drawn from copies of the bundles of `name` (figure name -> figure, nothing saved), and the steps they saved."
    out = tmp_path_factory.mktemp("bundles")
    runs = [out / (name if name in BUNDLES else f"{name}-{i}") for i in range(len(TOGETHER.get(name, [0])))]
    for run, src in zip(runs, TOGETHER.get(name, [BUNDLES.get(name)])):
        shutil.copytree(ROOT / "figures" / src, run, ignore=shutil.ignore_patterns("checkpoints"))
    for a in available_analyses(): analysis_module(a)  # imported before their save_figure is replaced
    figs = {}
    with pytest.MonkeyPatch.context() as mp:
        for m in [m for n, m in sys.modules.items() if n.startswith("embryo.") and hasattr(m, "save_figure")]:
            mp.setattr(m, "save_figure", lambda fig, out_dir, name: figs.setdefault(name, fig) and [])
        mp.setattr(A, "write_gif", lambda *a, **k: None)
        if name == "compare": compare_runs(runs, out / "figures")
        elif name == "seeds": seed_bands(runs, out / "figures", resamples=50)
        else: redraw_all(runs[0], out / "figures")
    for fig in figs.values(): fig.canvas.draw()
    assert len({tuple(saved_steps(r)) for r in runs}) == 1, name  # one schedule for the runs drawn together
    return figs, np.array(saved_steps(runs[0]), dtype=float)


@pytest.fixture(scope="module", params=[*BUNDLES, *TOGETHER])
def drawn(request, tmp_path_factory):
    figs, saved = _draw(tmp_path_factory, request.param)
    yield request.param, figs, saved
    import matplotlib.pyplot as plt
    plt.close("all")


def _curves(fig, saved):
    "(axes, line, x, y, measured) of each line drawn over saved checkpoints in data coordinates (not the training log, not a mark)."
    for ax in fig.axes:
        for line in ax.lines:
            if line.get_transform() is not ax.transData: continue  # axhline, axvline
            x, y = (np.asarray(v, dtype=float) for v in line.get_data())
            ok = np.isfinite(y)
            if ok.sum() >= 2 and np.isin(x[ok], saved).all(): yield ax, line, x, y, ok


def _legends(fig):
    return [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)


def test_measured_points_are_markers_and_no_line_crosses_an_unevaluated_checkpoint(drawn):
    name, figs, saved = drawn
    checked, breaks = 0, 0
    for fname, fig in figs.items():
        for ax, line, x, y, ok in _curves(fig, saved):
            checked += 1
            assert line.get_marker() not in NO_MARKER, (name, fname, line.get_label())
            if line.get_linestyle() in NO_MARKER: continue  # markers only
            both = ok[:-1] & ok[1:]  # the segments drawn
            for a, b in zip(x[:-1][both], x[1:][both]):
                skipped = saved[(saved > a) & (saved < b)]
                assert not len(skipped), f"{name} {fname} {line.get_label()!r}: a line from step {a:g} to {b:g} over {skipped[:3]}"
            breaks += (~ok).sum()
    assert checked >= 10, (name, checked)
    assert breaks > 0 or name == "tiny-facts", name  # some analysis skipped checkpoints (the facts run evaluated all)


def test_every_figure_that_marks_the_loss_drop_names_it_last(drawn):
    "Figs. 1 and 3 (and 7, 8, 10, 11, 14) drew the red dotted line without a legend entry; Fig. 6 listed it among the relations."
    name, figs, _ = drawn
    marked = [f for f, fig in figs.items() if any(l.get_gid() == TRANSITION_GID for ax in fig.axes for l in ax.lines)]
    # a figure marks the drop where the run has one (the facts run's log has none the detector finds); compare draws
    # runs with different loss drops and marks none
    has_drop = bool(transitions(ROOT / "figures" / (BUNDLES.get(name) or TOGETHER[name][0])))
    assert bool(marked) == (has_drop and name != "compare"), (name, has_drop, marked)
    for fname in marked:
        texts = [[t.get_text() for t in lg.get_texts()] for lg in _legends(figs[fname])]
        assert any(TRANSITION_LABEL in t for t in texts), (name, fname, texts)
        assert all(t[-1] == TRANSITION_LABEL for t in texts if TRANSITION_LABEL in t), (name, fname, texts)


def test_no_legend_covers_a_measured_point(drawn):
    "The similarity figure's legend sat on layers 0 and 1; Figs. 2b and 12 and Fig. 6 by exposure covered points too."
    name, figs, saved = drawn
    for fname, fig in figs.items():
        boxes = [lg.get_window_extent() for lg in _legends(fig)]
        for ax, line, x, y, ok in _curves(fig, saved):
            px, py = ax.transData.transform(np.c_[x[ok], y[ok]]).T
            for bb in boxes:
                under = (px > bb.x0) & (px < bb.x1) & (py > bb.y0) & (py < bb.y1)
                assert not under.any(), f"{name} {fname}: the legend covers {line.get_label()!r} at steps {x[ok][under]}"


def test_fig4_first_head_and_loss_drop_are_told_apart(drawn):
    "Both were red dotted lines, 450 steps apart on the default run (4,000 and 4,450)."
    name, figs, _ = drawn
    if "fig4_diagonal" not in figs: pytest.skip(f"{name} draws no Fig. 4 (diagonal)")
    for ax in figs["fig4_diagonal"].axes:
        first = [l for l in ax.lines if "first head with" in l.get_label()]
        drop = [l for l in ax.lines if l.get_gid() == TRANSITION_GID]
        assert first and drop, (name, [l.get_label() for l in ax.lines])
        assert first[0].get_color() != drop[0].get_color() and first[0].get_linestyle() != drop[0].get_linestyle()
        texts = [t.get_text() for t in ax.get_legend().get_texts()]
        assert first[0].get_label() in texts and TRANSITION_LABEL in texts, texts


def test_fig6_title_counts_the_relations_it_draws(drawn):
    "The title said '1 of the paper's 7 relations' above eight entries, the loss drop among them."
    name, figs, _ = drawn
    if "fig6_world_knowledge" not in figs: pytest.skip(f"{name} draws no Fig. 6")
    ax = figs["fig6_world_knowledge"].axes[0]
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    relations = [t for t in texts if re.match(r"P\d+ ", t)]
    assert texts[:len(relations)] == relations, texts  # the relations first, together
    found = re.search(r"(\d+) relations drawn, (\d+) of them among the paper's 7", ax.get_title())
    assert found and int(found[1]) == len(relations), (ax.get_title(), relations)


def test_no_y_label_is_clipped_and_the_similarity_label_fits_its_panel(drawn):
    "The similarity label (and compare's and seeds') was taller than the figure: clipped where it is shown without a tight box."
    name, figs, _ = drawn
    for fname, fig in figs.items():
        for ax in (a for a in fig.axes if a.get_ylabel() and a.get_visible()):
            lab, box, page = ax.yaxis.label.get_window_extent(), ax.get_window_extent(), fig.bbox
            assert page.y0 <= lab.y0 and lab.y1 <= page.y1, (name, fname, ax.get_ylabel(), lab, page)
            if fname.startswith("fig_similarity"): assert box.y0 - 1 <= lab.y0 and lab.y1 <= box.y1 + 1, (fname, lab, box)


def test_no_two_titles_overlap(drawn):
    "Fig. 12's panel titles ran into each other ('uncertainty (CoNLL-2010) (accuracy, not GLUE)' over its neighbour's)."
    name, figs, _ = drawn
    for fname, fig in figs.items():
        titles = [(ax, t) for ax in fig.axes if ax.get_visible() for t in (ax.title, ax._left_title, ax._right_title) if t.get_text()]
        boxes = [(t.get_text(), t.get_window_extent()) for _, t in titles]
        for i, (a, ba) in enumerate(boxes):
            for b, bb in boxes[i + 1:]:
                assert not ba.overlaps(bb), f"{name} {fname}: the titles {a!r} and {b!r} overlap"
