"""Hugging Face interop: our checkpoints load in transformers and theirs in ours, with identical outputs."""
import json
import os

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from embryo.config import ConfigError, get_config
from conftest import ROOT
from embryo.model.model import AlbertForPreTraining, CheckpointError, load_pretrained

CONFIGS = {  # at least two different configurations, including the two sharing modes transformers knows natively
    "tiny-all": dict(preset="tiny", vocab_size=120, num_hidden_layers=3),
    "wide-none": dict(preset="tiny", vocab_size=97, embedding_size=48, hidden_size=96, num_attention_heads=6,
                      intermediate_size=200, num_hidden_layers=2, sharing="none", hidden_act="gelu"),
}


def batch(vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (3, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    return ids, mask, types


def assert_same(ours, theirs, atol=1e-5):
    torch.testing.assert_close(ours.prediction_logits, theirs.prediction_logits, atol=atol, rtol=0)
    torch.testing.assert_close(ours.sop_logits, theirs.sop_logits, atol=atol, rtol=0)
    assert len(ours.hidden_states) == len(theirs.hidden_states)
    for a, b in zip(ours.hidden_states, theirs.hidden_states):
        torch.testing.assert_close(a, b, atol=atol, rtol=0)
    assert len(ours.attentions) == len(theirs.attentions)
    for a, b in zip(ours.attentions, theirs.attentions):
        torch.testing.assert_close(a, b, atol=atol, rtol=0)


def run_both(ours, hf, vocab):
    ids, mask, types = batch(vocab)
    with torch.no_grad():
        a = ours(ids, mask, types, output_attentions=True)
        b = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True, output_attentions=True)
    return a, b


@pytest.mark.parametrize("name", list(CONFIGS))
def test_ours_loads_in_transformers(name, tmp_path):
    kw = dict(CONFIGS[name])
    cfg = get_config(kw.pop("preset"), **kw)
    torch.manual_seed(1)
    ours = AlbertForPreTraining(cfg).eval()
    ours.save_pretrained(tmp_path)
    hf = transformers.AlbertForPreTraining.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert set(hf.state_dict()) == set(ours.state_dict())
    assert_same(*run_both(ours, hf, cfg.vocab_size))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_transformers_loads_in_ours(name, tmp_path):
    kw = dict(CONFIGS[name])
    cfg = get_config(kw.pop("preset"), **kw)
    hf_cfg = transformers.AlbertConfig(**{k: v for k, v in cfg.to_dict().items() if k != "sharing"},
                                       num_hidden_groups=1 if cfg.sharing == "all" else cfg.num_hidden_layers,
                                       attn_implementation="eager")
    torch.manual_seed(2)
    hf = transformers.AlbertForPreTraining(hf_cfg).eval()
    with torch.no_grad():  # random non-zero biases and LayerNorms, so a mis-wired one cannot hide
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    hf.save_pretrained(tmp_path)
    ours = load_pretrained(tmp_path)
    assert ours.config.sharing == cfg.sharing
    assert set(hf.state_dict()) == set(ours.state_dict())
    assert_same(*run_both(ours, hf, cfg.vocab_size))


@pytest.mark.parametrize("sharing", ["attention", "ffn"])
def test_partial_sharing_round_trips(sharing, tmp_path):
    cfg = get_config("tiny", vocab_size=80, num_hidden_layers=3, sharing=sharing)
    ours = AlbertForPreTraining(cfg).eval()
    ours.save_pretrained(tmp_path)
    back = load_pretrained(tmp_path)
    assert back.config.sharing == sharing
    assert back.num_parameters() == ours.num_parameters()
    hf = transformers.AlbertForPreTraining.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert_same(*run_both(back, hf, cfg.vocab_size))


def test_bert_like_e_equals_h(tmp_path):
    cfg = get_config("bert-base", vocab_size=90, hidden_size=64, embedding_size=64, num_attention_heads=2,
                     intermediate_size=128, num_hidden_layers=2)
    ours = AlbertForPreTraining(cfg).eval()
    assert not any("embedding_hidden_mapping_in" in k for k in ours.state_dict())
    ours.save_pretrained(tmp_path)
    hf = transformers.AlbertForPreTraining.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert_same(*run_both(ours, hf, cfg.vocab_size))
    assert_same(*run_both(load_pretrained(tmp_path), hf, cfg.vocab_size))


def test_training_matches_transformers_gradients(tmp_path):
    cfg = get_config("tiny", vocab_size=60, num_hidden_layers=2, classifier_dropout_prob=0.0)  # no randomness in train mode
    ours = AlbertForPreTraining(cfg).train()
    ours.save_pretrained(tmp_path)
    hf = transformers.AlbertForPreTraining.from_pretrained(tmp_path).train()
    ids, mask, types = batch(60)
    labels = torch.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    sop = torch.tensor([0, 1, 0])
    a = ours(ids, mask, types, labels=labels, sentence_order_label=sop)
    b = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, sentence_order_label=sop)
    torch.testing.assert_close(a.loss, b.loss, atol=1e-5, rtol=0)
    a.loss.backward(); b.loss.backward()
    g_ours = dict(ours.named_parameters())["albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight"].grad
    g_hf = dict(hf.named_parameters())["albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight"].grad
    torch.testing.assert_close(g_ours, g_hf, atol=1e-6, rtol=1e-4)


# --- bad input: clear errors naming the file and the field ---------------------------------------------------------

def test_bad_configs():
    with pytest.raises(ConfigError, match="unknown preset 'giant'; the presets are: tiny, small"):
        get_config("giant")
    with pytest.raises(ConfigError, match="unknown ModelConfig field.*num_layers"):
        get_config("tiny", num_layers=3)
    with pytest.raises(ConfigError, match="hidden_size=250 is not divisible by num_attention_heads=4"):
        get_config("tiny", hidden_size=250)
    with pytest.raises(ConfigError, match="sharing='some'"):
        get_config("tiny", sharing="some")


def test_missing_folder_and_weights(tmp_path):
    with pytest.raises(CheckpointError, match="is not a folder"):
        load_pretrained(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="config.json is missing"):
        load_pretrained(tmp_path)
    AlbertForPreTraining(get_config("tiny", vocab_size=50, num_hidden_layers=1)).save_pretrained(tmp_path)
    os.remove(tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="has no weights: expected model.safetensors"):
        load_pretrained(tmp_path)


def test_mismatched_shapes_and_keys(tmp_path):
    AlbertForPreTraining(get_config("tiny", vocab_size=50, num_hidden_layers=1)).save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 512}))
    with pytest.raises(CheckpointError, match=r"model.safetensors: tensor .*ffn.weight has shape \(1024, 256\) but config.json implies \(512, 256\)"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sd = load_file(tmp_path / "model.safetensors")
    sd.pop("albert.pooler.weight")
    save_file(sd, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"missing keys \['albert.pooler.weight'\]"):
        load_pretrained(tmp_path)


def test_pickle_needs_opt_in(tmp_path):
    model = AlbertForPreTraining(get_config("tiny", vocab_size=50, num_hidden_layers=1)).eval()
    model.save_pretrained(tmp_path)
    sd = load_file(tmp_path / "model.safetensors")
    os.remove(tmp_path / "model.safetensors")
    torch.save(sd, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pytorch_model.bin, a pickle file .* allow_pickle=True"):
        load_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path, allow_pickle=True)
    ids = torch.randint(5, 50, (1, 6))
    torch.testing.assert_close(loaded(ids).prediction_logits, model(ids).prediction_logits)


def test_shared_blocks_must_be_equal(tmp_path):
    AlbertForPreTraining(get_config("tiny", vocab_size=50, num_hidden_layers=2, sharing="ffn")).save_pretrained(tmp_path)
    sd = load_file(tmp_path / "model.safetensors")
    k = "albert.encoder.albert_layer_groups.1.albert_layers.0.ffn.weight"
    sd[k] = sd[k] + 1
    save_file(sd, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="sharing='ffn' but .*groups.1.albert_layers.0.ffn.weight differs"):
        load_pretrained(tmp_path)


def test_unsupported_transformers_configs(tmp_path):
    AlbertForPreTraining(get_config("tiny", vocab_size=50, num_hidden_layers=4)).save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_hidden_groups": 2, "embryo_sharing": None}))
    with pytest.raises(CheckpointError, match="config.json: num_hidden_groups=2 is not supported"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_type": "bert"}))
    with pytest.raises(CheckpointError, match="model_type is 'bert'"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json is not valid JSON"):
        load_pretrained(tmp_path)


def test_checkpoint_config_has_albert_keys_only():
    "config.json holds transformers' AlbertConfig fields and embryo_sharing, nothing of embryo's own (model_type is ALBERT's)."
    import json as _json
    from transformers import AlbertConfig
    from embryo.model.model import to_hf_config
    got = _json.loads(to_hf_config(get_config("tiny")).to_json_string())
    assert set(got) - set(AlbertConfig().to_dict()) == {"embryo_sharing"}, set(got) - set(AlbertConfig().to_dict())
    assert got["model_type"] == "albert"


@pytest.mark.parametrize("bundle", ["", "electra-tiny-mature"])
def test_an_exported_run_loads_with_transformers_and_sweeps_back(bundle, tmp_path):
    """Issue 76, item 4: a run folder was not a Hugging Face model (its checkpoints sit in checkpoints/step_N/). `embryo
    export` writes a hub-style repository: the root and each step's subfolder load with AutoModel and give the run's own
    checkpoints' outputs, and `embryo sweep --run` reads it back as a series of the same steps."""
    import subprocess, sys, transformers
    from embryo.runs.run import checkpoint_dir, list_steps
    run = ROOT / "figures" / bundle / "run"
    steps = list_steps(run)
    cli = lambda *a: subprocess.run([sys.executable, "-m", "embryo.cli", *a], cwd=tmp_path, capture_output=True, text=True)
    r = cli("export", "--run", str(run), "--to", "repo")
    assert r.returncode == 0 and "wrote repo" in r.stdout, r.stderr[-2000:]
    ids = torch.tensor([[2, 45, 67, 89, 101, 3]])
    hidden = lambda f, **kw: transformers.AutoModel.from_pretrained(f, **kw).eval()(ids).last_hidden_state
    with torch.no_grad():
        assert torch.equal(hidden(tmp_path / "repo"), hidden(checkpoint_dir(run, steps[-1])))
        for s in steps:
            assert torch.equal(hidden(tmp_path / "repo", subfolder=f"step_{s:07d}"), hidden(checkpoint_dir(run, s)))
    assert f"| {steps[0]:,} | `step_{steps[0]:07d}` |" in (tmp_path / "repo" / "README.md").read_text()
    again = cli("export", "--run", str(run), "--to", "repo")
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "exists and is not an empty folder" in again.stderr
    back = cli("sweep", "--run", "repo", "--analyses", "ngram", "--steps", str(steps[-1]), "--mode", "inprocess",
               "--option", "ngram.max_sentences=20")
    assert back.returncode == 0, back.stdout[-2000:] + back.stderr[-2000:]
    assert list_steps(tmp_path / "runs" / "repo") == steps and (tmp_path / "runs" / "repo" / "logs" / "train.jsonl").exists()
