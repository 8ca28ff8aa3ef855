"""Issue 73, item 10: no stale bundle. Every committed bundle's verdicts (report.json, findings.md, and the tables that end
with their verdict) are what today's code says of the bundle's own committed database (`embryo.publish.bundle.refresh_bundle`
rewrites them)."""
import json
from pathlib import Path

import pytest

from embryo.experiments.compare import RUN_BUNDLE
from embryo.publish.report import REPORT_JSON, FINDINGS_FILE, findings_text, report_sections
from embryo.publish.bundle import bundle_dirs

from conftest import ROOT

FIG = ROOT / "figures"
BUNDLES = bundle_dirs(FIG)


def _shown(b) -> list[dict]:
    "The sections today's code writes into the bundle's report.json (as `write_report` picks them: a figure or table present)."
    keys = ("file", "paper", "caption", "finding", "verdict", "analysis")
    return [{k: r.get(k, "") for k in keys} for r in report_sections(b / RUN_BUNDLE, b)
            if (b / f"{r['file']}.png").exists() or (b / f"{r['file']}.csv").exists()]


def _tail(md: str) -> str:
    "The text after a Markdown table's last row: where the analyses' tables write their verdict."
    lines = md.rstrip("\n").splitlines()
    last = max((i for i, l in enumerate(lines) if l.startswith("|")), default=len(lines) - 1)
    return "\n".join(lines[last + 1:]).strip()


def test_every_bundle_is_found():
    names = {b.relative_to(FIG).as_posix() for b in BUNDLES}
    assert {".", "mature", "bert-tiny", "electra-tiny", "bert-tiny-mature", "electra-tiny-mature", "facts", "seeds/seed1",
            "seeds/seed2"} <= names, names


@pytest.mark.parametrize("b", BUNDLES, ids=[b.relative_to(FIG).as_posix() for b in BUNDLES])
def test_committed_verdicts_are_what_todays_code_says(b, tmp_path):
    committed = json.loads((b / REPORT_JSON).read_text())
    shown = _shown(b)
    want = {s["file"]: s for s in committed["sections"]}
    got = {s["file"]: s for s in shown}
    stale = [f"{f}:\n  committed: {want.get(f, {}).get('verdict')}\n  today:     {got.get(f, {}).get('verdict')}"
             for f in sorted(set(want) | set(got)) if want.get(f) != got.get(f)]
    assert not stale, f"{b}: run embryo.publish.bundle.refresh_bundle('{b}')\n" + "\n".join(stale)
    # findings.md: present, and the findings table of today's sections
    (tmp_path / REPORT_JSON).write_text(json.dumps(dict(run=committed["run"], sections=shown)))
    assert (b / FINDINGS_FILE).exists(), f"{b} has no {FINDINGS_FILE}"
    assert (b / FINDINGS_FILE).read_text() == findings_text(tmp_path, committed["run"]), f"{b / FINDINGS_FILE} is stale"
    # the tables that end with their verdict end with today's
    for s in shown:
        md = b / f"{s['file']}.md"
        if s["analysis"] and s["verdict"] and md.exists() and (tail := _tail(md.read_text())):
            assert tail == s["verdict"].strip(), f"{md}: its verdict is stale:\n  {tail}\n  today: {s['verdict']}"


def test_the_check_sees_a_stale_verdict(tmp_path):
    "The check above fails on a bundle whose report.json holds an older verdict (seed 2's before issue 73)."
    import shutil
    b = shutil.copytree(FIG / "seeds" / "seed2", tmp_path / "seed2", ignore=shutil.ignore_patterns("checkpoints", "*.png",
                                                                                                    "*.svg", "*.gif"))
    for p in (FIG / "seeds" / "seed2").glob("*.png"): (b / p.name).touch()  # write_report shows a section by its image
    rep = json.loads((b / REPORT_JSON).read_text())
    sec = next(s for s in rep["sections"] if s["file"] == "fig6_world_knowledge")
    sec["verdict"] = ("At step 8000 the model's top prediction is right for 0.0% of the cloze queries (mean over 8 "
                      "relations; 0.7% within the common vocabulary); over the 13 steps evaluated the mean P@1 peaks at "
                      "step 0 (0.1%).")
    (b / REPORT_JSON).write_text(json.dumps(rep))
    with pytest.raises(AssertionError, match="fig6_world_knowledge"):
        test_committed_verdicts_are_what_todays_code_says(b, tmp_path)


def test_comparisons_and_seed_bands_are_what_todays_code_says(tmp_path, monkeypatch):
    """figures/compare*/ and figures/seeds/ re-derived from the committed bundles: their Markdown the same, their
    JSON's verdicts the same (`refresh_comparisons` on a copy of their text)."""
    import shutil
    from embryo.publish import bundle as R
    copies = {}
    for d in [*sorted(FIG.glob("compare*")), FIG / "seeds"]:
        if (d / "compare.json").exists() or (d / "seeds.json").exists():
            copies[d] = tmp_path / d.name
            shutil.copytree(d, copies[d], ignore=shutil.ignore_patterns("*.png", "*.svg", "seed[0-9]*"))
    assert len(copies) >= 3, copies
    # the same function, writing into the copies (the bundles read where they are)
    real_copy = R._copy_text
    monkeypatch.setattr(R, "_copy_text", lambda src, dst: real_copy(src, copies[Path(dst)]))
    R.refresh_comparisons(FIG)
    for d, c in copies.items():
        for f in sorted(c.glob("*.md")):
            assert f.read_text() == (d / f.name).read_text(), f"{d / f.name} is stale: run embryo.publish.bundle.refresh_comparisons()"
        for f in sorted(c.glob("*.json")):
            assert R.verdict_texts(json.loads(f.read_text())) == R.verdict_texts(json.loads((d / f.name).read_text())), (
                f"{d / f.name}: its verdicts are stale")
