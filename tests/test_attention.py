"""Attention maps across checkpoints (nbs/08_attention.ipynb): papermill run for one step, idempotent rows and maps,
known maps give known numbers, transformers agrees on the maps, clear errors, figures and verdict from the database."""
import json
import types
from pathlib import Path

import numpy as np
import papermill as pm
import pytest
import torch

from embryo.analyses import attention as A
from embryo.text.tokenizer import load_tokenizer
from embryo.runs.run import CheckpointNotFound, find_checkpoint, list_steps, load_checkpoint
from embryo.runs.results import read_results, read_samples, write_results

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "attention"
SMALL = dict(n_sentences=24, seq_len=12)  # enough for every check here, and fast


def test_papermill_one_step_then_rerun_is_idempotent(fixture_copy, tmp_path):
    run, step = fixture_copy, list_steps(fixture_copy)[-1]
    fig = tmp_path / "fig"
    pm.execute_notebook(str(ROOT / "nbs" / "08_attention.ipynb"), str(tmp_path / "out.ipynb"), cwd=str(ROOT / "nbs"),
                        parameters=dict(run_dir=str(run), step=step, n_sentences=32, seq_len=16, figures_dir=str(fig)),
                        progress_bar=False, kernel_name="python3")
    L, H = 2, 2  # the fixture model
    rows = read_results(run, A.ANALYSIS, step=step)
    assert len(rows) == len(A.METRICS) * L * H + 1 and set(rows.task) == {"brown"}
    assert sorted(set(rows.layer)) == [-1, 1, 2] and (rows.n == 32).all()
    maps = read_samples(run, A.ANALYSIS)
    assert sorted(maps[maps.step == step].item) == ["L1/H1", "L2/H1"]  # small model: the last head, layers 1, 2
    assert np.array(json.loads(maps.text.iloc[0])["map"]).shape == (16, 16)
    for name in ("fig4_attention_maps.png", "fig4_attention_maps.svg", "fig4_attention_maps.gif", "fig4_diagonal.png",
                 "fig4_diagonal.svg", "table_fig4_diagonal_emergence.md", "table_fig4_diagonal_emergence.csv"):
        assert (fig / name).stat().st_size > 0, name
    before = rows.sort_values(["layer", "metric"]).value.to_numpy()
    A.evaluate_step(run, step, n_sentences=32, seq_len=16)  # the same computation from Python: same numbers, no duplicates
    again = read_results(run, A.ANALYSIS, step=step)
    assert len(again) == len(rows) and len(read_samples(run, A.ANALYSIS)) == len(maps)
    np.testing.assert_allclose(again.sort_values(["layer", "metric"]).value.to_numpy(), before, atol=1e-9)


def test_missing_step_lists_the_steps_there_are(fixture_copy):
    with pytest.raises(CheckpointNotFound, match="has no checkpoint for step 25; it has 0, 1, 2, 4, 8, 16, 20, 30"):
        A.evaluate_step(fixture_copy, 25)


def test_unknown_task_lists_the_known_ones(fixture_copy):
    with pytest.raises(A.UnknownTask, match="unknown attention task 'ontonotes'; the known tasks are brown"):
        A.evaluate_step(fixture_copy, 30, task="ontonotes")
    with pytest.raises(A.UnknownTask, match="the known tasks are brown"):
        A.redraw(fixture_copy, task="wiki")


def test_a_head_or_layer_that_does_not_exist_names_the_valid_range(fixture_copy):
    with pytest.raises(ValueError, match=r"head\(s\) 11 do not exist: this model's heads are 0..1"):
        A.evaluate_step(fixture_copy, 30, heads=11, **SMALL)
    with pytest.raises(ValueError, match=r"layer\(s\) 0, 8 do not exist: this model's layers with attention are 1..2"):
        A.evaluate_step(fixture_copy, 30, layers="0,8", **SMALL)
    assert A.choose_maps(12, 12) == ([1, 2, 8], [11])  # the paper's choice where the model has it


def test_maps_equal_transformers_eager_attention(fixture_copy):
    from transformers import AlbertModel
    tok = load_tokenizer(fixture_copy)
    ids = A.input_ids(tok, **SMALL)
    ours, _ = A.attention_maps(load_checkpoint(fixture_copy, 30), ids)
    hf = AlbertModel.from_pretrained(find_checkpoint(fixture_copy, 30), attn_implementation="eager").eval()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=torch.ones_like(ids), output_attentions=True).attentions
    np.testing.assert_allclose(torch.stack(theirs, 1).double().mean(0).numpy(), ours, atol=1e-6)


class KnownAttention(torch.nn.Module):
    "A stand-in model: head 0 of every layer attends to the previous token (the first to itself), head 1 to [CLS]."
    def __init__(self):
        super().__init__()
        self.config = types.SimpleNamespace(num_hidden_layers=3, num_attention_heads=2)

    def forward(self, ids, attention_mask=None, token_type_ids=None, output_attentions=False):
        B, T = ids.shape
        prev = torch.eye(T).roll(-1, 1); prev[0] = 0; prev[0, 0] = 1  # row i has its 1 at column i-1
        cls = torch.zeros(T, T); cls[:, 0] = 1
        att = torch.stack([prev, cls]).expand(B, 2, T, T)
        return types.SimpleNamespace(attentions=(att,) * self.config.num_hidden_layers)

    def albert(self, ids, attention_mask, token_type_ids, attentions=False):
        "The encoder as `embryo.runs.run.encoder_states` reads it: hidden states (L + 1), attention maps (L), and a pooled output."
        hs = (torch.zeros(*ids.shape, 4),) * (self.config.num_hidden_layers + 1)
        return hs, self(ids, attention_mask, token_type_ids, output_attentions=attentions).attentions, None


def test_known_attention_gives_known_rows(fixture_copy, tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "spiece.model").write_bytes((fixture_copy / "spiece.model").read_bytes())
    monkeypatch.setattr(A, "find_checkpoint", lambda *a, **k: run)
    monkeypatch.setattr(A, "resolve_step", lambda run_dir, step: int(step))  # a stand-in model at a step of its own
    monkeypatch.setattr(A, "load_checkpoint", lambda *a, **k: KnownAttention())
    T = SMALL["seq_len"]
    df = A.evaluate_step(run, 7, **SMALL)
    got = {(r.layer, r.head, r.metric): r.value for r in read_results(run, A.ANALYSIS, step=7).itertuples()}
    assert len(got) == len(df) == len(A.METRICS) * 3 * 2 + 1
    for layer in (1, 2, 3):
        assert got[(layer, 0, "prev")] == pytest.approx((T - 1) / T) and got[(layer, 0, "self")] == pytest.approx(1 / T)
        assert got[(layer, 0, "diagonal")] == pytest.approx(1.0) and got[(layer, 0, "entropy")] == pytest.approx(0, abs=1e-9)
        assert got[(layer, 1, "cls")] == pytest.approx(1.0) and got[(layer, 1, "sep")] == pytest.approx(0.0)
        assert got[(layer, 1, "diagonal")] == pytest.approx(2 / T)  # [CLS] is a neighbour of positions 0 and 1 only
    assert got[(-1, -1, "uniform_diagonal")] == pytest.approx((3 * T - 2) / T ** 2)
    maps = A.stored_maps(run)
    assert list(maps) == [(1, 1), (2, 1), (3, 1)]  # layers 1, 2, L and the last head
    assert maps[(3, 1)][7][:, 0].tolist() == [1.0] * T


def test_stored_map_format_reads_back(tmp_path):
    text = (DATA / "map_sample.json").read_text().strip()
    write_results(tmp_path, A.ANALYSIS, 5, [], [dict(task="brown", item="L2/H1", text=text)])
    maps = A.stored_maps(tmp_path)
    m = maps[(2, 1)][5]
    assert m.shape == (4, 4) and np.allclose(m.sum(1), 1)
    st = A.map_stats(m)
    assert st["diagonal"] == pytest.approx(3.75 / 4) and st["cls"] == pytest.approx(0.2625) and st["sep"] == pytest.approx(0.2)
    assert st["prev"] + st["self"] + st["next"] == pytest.approx(st["diagonal"])


def _fake_run(run, emerge: dict[int, int], steps=(0, 3, 10, 30, 100, 300, 1000)):  # a step between each two emergences
    "A database in which the diagonal mass of head 0 in each layer jumps from 0.12 to 0.6 at step `emerge[layer]`."
    for s in steps:
        rows = [dict(task="brown", metric="uniform_diagonal", value=0.12, n=1)]
        for layer, at in emerge.items():
            for h in (0, 1):
                d = 0.6 if (h == 0 and s >= at) else 0.12
                rows += [dict(task="brown", layer=layer, head=h, metric=m, value=d if m == "diagonal" else 0.1, n=1)
                         for m in A.METRICS]
        write_results(run, A.ANALYSIS, s, rows)


def test_verdict_tests_the_papers_order(tmp_path):
    _fake_run(tmp_path / "up", {1: 1000, 2: 100, 3: 10})  # the top layer first, layer 1 last: as the paper
    v = A.verdict(tmp_path / "up")
    assert "layer 1 at step 1000, layer 2 at step 100, layer 3 at step 10" in v and v.endswith("is reproduced on this run.")
    _fake_run(tmp_path / "down", {1: 10, 2: 100, 3: 1000})
    assert A.verdict(tmp_path / "down").endswith("is not reproduced on this run.")
    _fake_run(tmp_path / "flat", {1: 10**6, 2: 10**6})
    assert "No layer develops the diagonal pattern" in A.verdict(tmp_path / "flat")
    t = A.emergence_table(tmp_path / "up")
    assert t["emergence step"].tolist() == [1000, 100, 10] and t["head"].tolist() == [0, 0, 0]


def test_redraw_from_the_database_only(fixture_copy, tmp_path):
    for s in (0, 30): A.evaluate_step(fixture_copy, s, **SMALL)
    paths = A.redraw(fixture_copy, tmp_path)
    assert sorted(p.name for p in paths) == sorted(
        ["fig4_attention_maps.png", "fig4_attention_maps.svg", "fig4_attention_maps.gif", "fig4_diagonal.png",
         "fig4_diagonal.svg", "table_fig4_diagonal_emergence.md", "table_fig4_diagonal_emergence.csv"])
    from PIL import Image
    assert Image.open(tmp_path / "fig4_attention_maps.gif").n_frames == len(A.stored_maps(fixture_copy)[(1, 1)])
    assert "Fig. 4" in (tmp_path / "fig4_diagonal.svg").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left behind
    assert A.verdict(fixture_copy).startswith("Between steps 0 and 30, ")
    assert {r["file"] for r in A.REPORT} <= {p.stem for p in paths}


def test_neighbour_heads_measure_prev_and_next_against_an_even_spread(tmp_path):
    T = 24
    for s, mass in ((0, 0.04), (10, 0.1), (100, 0.3)):  # head 1 of layer 2 moves onto the previous token
        rows = [dict(task="brown", metric="uniform_diagonal", value=(3 * T - 2) / T ** 2, n=1)]
        for layer in (1, 2):
            for h in (0, 1):
                for m in A.METRICS:
                    v = mass if (layer, h, m) == (2, 1, "prev") else (T - 1) / T ** 2 if m in ("prev", "next") else 0.1
                    rows.append(dict(task="brown", layer=layer, head=h, metric=m, value=v, n=1))
        write_results(tmp_path, A.ANALYSIS, s, rows)
    n = A.neighbour_heads(tmp_path)
    even = (T - 1) / T ** 2
    assert n.loc[100, ["metric", "layer", "head"]].tolist() == ["prev", 2, 1]
    assert n.loc[100, "ratio"] == pytest.approx(0.3 / even) and n.loc[0, "even"] == pytest.approx(even)
    assert n.at_least.tolist() == [False, False, True]  # 0.1 is 2.5x an even spread (23/576), 0.3 is 7.5x
    v = A.verdict(tmp_path)
    assert "layer 2 head 1 puts 0.30 of its attention on the previous token, 7.5 times" in v
    assert "passes 5x first at step 100" in v


def test_layer_order_tied_on_the_grid_is_not_testable(tmp_path, root):
    "The committed quick run: layers 4, 2 and 1 all emerge at step 3,500 on a 500-step grid, and the verdict said 'not reproduced'."
    import shutil
    from embryo.analyses import attention
    run = shutil.copytree(root / "figures" / "run", tmp_path / "tiny", ignore=shutil.ignore_patterns("checkpoints"))
    v = attention.verdict(run)
    assert "not testable at this checkpoint spacing" in v and "not reproduced" not in v, v


def _untrained_gpt2_series(folder: Path, steps=(0, 1000)) -> Path:
    """A near-untrained GPT-2 series (random weights at each step, seed = its index) with a byte-level BPE of no special
    tokens (test_series' GPT-NeoX tokenizer: nothing around a text), as a run beside `folder`."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from embryo.train.fixtures import corpus_slice
    from embryo.runs.series import as_run
    from test_series import SERIES, _tokenizer  # the tokenizer test_series trains for its causal-LM series
    lines = [l.strip() for l in corpus_slice().read_text().splitlines() if l.strip()][:SERIES["sentences"]]
    tok = _tokenizer("gpt-neox", lines)
    for i, s in enumerate(steps):
        torch.manual_seed(i)
        d = folder / f"step{s}"
        GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                   bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)).save_pretrained(d)
        tok.save_pretrained(d)
    return as_run(folder, folder.with_name(folder.name + "-run"))


def test_a_causal_series_is_measured_against_an_even_spread_over_the_visible_positions(tmp_path):
    """Issue 73, item 5: a near-untrained GPT-2 attends about evenly over positions 0..i (its causal mask), which puts
    (2 H_T - 1) / T on i-1, i, i+1 (H_T = 1 + 1/2 + ... + 1/T): 0.434 at T = 12, where an encoder's even spread puts
    (3T - 2) / T^2 = 0.236. Against the encoder's floor it read as diagonal (prev 2.3x an even spread), and its
    verdict spoke of [CLS] and [SEP], which its tokenizer has not."""
    run = _untrained_gpt2_series(tmp_path / "gpt2-untrained")
    T = SMALL["seq_len"]
    for s in (0, 1000): A.evaluate_step(run, s, **SMALL)
    H = sum(1 / k for k in range(1, T + 1))
    floor, prev, first = (2 * H - 1) / T, (H - 1) / T, H / T
    u = read_results(run, A.ANALYSIS, metric="uniform_diagonal")
    assert len(u) == 2 and u.value.to_numpy() == pytest.approx([floor] * 2)
    t = A.emergence_table(run)
    assert (t["diagonal, last step"] / floor).between(0.9, 1.3).all(), t  # no more diagonal than an even spread
    assert not [c for c in t.columns if "[CLS]" in c or "[SEP]" in c], list(t.columns)
    n = A.neighbour_heads(run)
    assert set(n.metric) == {"prev"} and n.even.to_numpy() == pytest.approx([prev] * 2) and (n.ratio < 2).all(), n
    v = A.verdict(run)
    assert "[CLS]" not in v and "[SEP]" not in v, v
    assert f"against {floor:.3f} for an even spread over the visible positions" in v, v
    assert "next token" in v and "0 by construction" in v, v
    assert f"first token" in v and f"against {first:.2f}" in v, v
    paths = A.redraw(run, tmp_path / "fig")  # the table, its verdict and the figures say the same
    md = (tmp_path / "fig" / "table_fig4_diagonal_emergence.md").read_text()
    assert "[CLS]" not in md and "[SEP]" not in md and "first-token mass" in md and v in md
    assert "causal mask: token i sees positions 0..i" in (tmp_path / "fig" / "fig4_attention_maps.svg").read_text()
    assert "over the positions it sees (causal mask)" in (tmp_path / "fig" / "fig4_diagonal.svg").read_text()
    assert len(paths) == 7
    import sqlite3  # a database written before causal_mask rows: the encoder's floor stored, no flag; read the same
    with sqlite3.connect(run / "results.sqlite") as con:
        con.execute("UPDATE results SET value = ? WHERE metric = 'uniform_diagonal'", ((3 * T - 2) / T ** 2,))
        con.execute("DELETE FROM results WHERE metric = 'causal_mask'")
    assert read_results(run, A.ANALYSIS, metric="causal_mask").empty and A.stale_causal(run)
    assert A.verdict(run) == v
