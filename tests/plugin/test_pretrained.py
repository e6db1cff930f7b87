"""Fine-tuning a stock fairseq Transformer with the lexical head (fairseq_lexical/models/pretrained.py): a
`transformer_tiny` trained here by stock fairseq (no --user-dir) stands in for a pretrained checkpoint, since none can
be downloaded; likewise a tiny mBART and a tiny multilingual (NLLB / M2M-100 style) model for their families. Pinned:
the checkpoint's sizes replace the arch's, every pretrained weight arrives unchanged, the model's distribution at
step 0 is the pretrained one to within 1 - p_gate, training moves the gate, language tokens are never copied, and
the mistakes (another architecture, other dictionaries, a dictionary without the language tokens) end fairseq-train
with one line each."""

import os
import shutil

import pytest
import torch

from tests.helpers.environment import USER_DIR, run_cli
from tests.helpers.toy_data import binarise
from tests.helpers.models import build_model
from tests.helpers.tiny_runs import tiny_generate_args, tiny_train_args

UPDATES = 12
PRETRAINED_LOG = "fairseq_lexical.models.pretrained"  # the logger of the module under test


@pytest.fixture(scope="module")
def stock(toy_data, tmp_path_factory):
    """(joined data-bin, checkpoint of a stock fairseq transformer_tiny with shared embeddings)."""
    root = tmp_path_factory.mktemp("stock")
    binarise(toy_data, root / "bin", "--joined-dictionary")
    options = ("--arch", "transformer_tiny", "--share-all-embeddings", "--label-smoothing", "0.1")
    argv = tiny_train_args(root / "bin", root / "ckpt", *options, updates=UPDATES, seed=2, validation=False,
                           criterion="label_smoothed_cross_entropy", user_dir=None)  # fmt: skip
    run_cli("fairseq-train", *argv)
    return root / "bin", root / "ckpt" / "checkpoint_last.pt"


def stock_model(checkpoint):
    from fairseq import checkpoint_utils

    (model,), _, _ = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    return model.eval()


def fine_tuned(data, checkpoint, *options):
    """The plugin's model as fairseq-train builds it to fine-tune ``checkpoint``, the stock weights loaded as the
    trainer loads them (strict)."""
    model, _, args = build_model(data, *options, "--finetune-from-model", checkpoint)
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    model.load_state_dict(state, strict=True, args=args)
    return model.eval(), state


def batch(data):
    """A batch of the toy validation set, as fairseq's collater makes it."""
    from fairseq import options, tasks

    args = options.parse_args_and_arch(options.get_training_parser(), [str(data), "--arch", "transformer_tiny"])
    task = tasks.setup_task(args)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    return dataset.collater([dataset[i] for i in range(8)])


@pytest.mark.parametrize("arch", ["pgn_transformer", "lex_transformer_tiny"])
def test_fine_tuning_starts_from_the_pretrained_distribution(stock, toy_data, arch):
    data, checkpoint = stock
    lexicon = [] if arch == "pgn_transformer" else ["--lexicon", toy_data / "lexicon.tsv"]
    model, state = fine_tuned(data, checkpoint, "--arch", arch, *lexicon)
    # the checkpoint's sizes, not the arch's (pgn_transformer has 6 + 6 layers of 512)
    assert len(model.encoder.layers) == 2 and model.encoder.embed_tokens.embedding_dim == 64
    own = model.state_dict()
    assert all(torch.equal(own[name], value) for name, value in state.items())  # every weight unchanged
    head = {name for name in own if name not in state}
    assert head and all(name.startswith("decoder.lexical_head.") for name in head)

    reference = stock_model(checkpoint)
    sample = batch(data)["net_input"]
    with torch.no_grad():
        p_stock = reference.get_normalized_probs(reference(**sample), log_probs=False)
        out = model(**sample)
        p = model.get_normalized_probs(out, log_probs=False)
    gate = torch.sigmoid(torch.tensor(6.9)).item()
    assert torch.allclose(out[1]["p_gate"], torch.full_like(out[1]["p_gate"], gate))
    # p = g p_write + (1 - g) copy with p_write the pretrained distribution: |p - p_stock| <= 1 - g, and not 0
    difference = (p.float() - p_stock.float()).abs().max().item()
    assert 0 < difference <= 1 - gate + 1e-6


def test_training_from_a_stock_checkpoint_moves_the_gate(stock, tmp_path):
    """...and the fine-tuned run resumes and decodes without the pretrained file (its own checkpoint holds the sizes
    taken from it; stock fairseq ignores --finetune-from-model once the save dir has a checkpoint_last.pt)."""
    data, checkpoint = stock
    pretrained = tmp_path / "pretrained.pt"
    shutil.copy(checkpoint, pretrained)
    argv = tiny_train_args(data, tmp_path, "--arch", "pgn_transformer", updates=6, validation=False)
    run_cli("fairseq-train", *argv, "--finetune-from-model", pretrained)
    pretrained.unlink()
    argv = tiny_train_args(data, tmp_path, "--arch", "pgn_transformer", updates=10, validation=False)
    log = run_cli("fairseq-train", *argv, "--finetune-from-model", pretrained).stdout
    assert f"resuming {tmp_path / 'checkpoint_last.pt'} (fine-tuned from {pretrained})" in log
    assert "6 updates" in log  # fairseq's "loaded checkpoint ... (epoch 1 @ 6 updates)"
    search = ("--beam", "2", "--batch-size", "8", "--task", "lexical_translation")
    out = run_cli("fairseq-generate", *tiny_generate_args(data, tmp_path / "checkpoint_last.pt", *search)).stdout
    assert sum(line.startswith("H-") for line in out.splitlines()) == 20
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 10
    state = state["model"]
    gate = state["decoder.lexical_head.gate.weight"]
    assert gate.abs().max() > 0  # the gate started at weight 0 (and bias 6.9) and learned
    stock_state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    assert not torch.equal(state["decoder.layers.0.fc1.weight"], stock_state["decoder.layers.0.fc1.weight"])


def test_mistakes_end_fairseq_train_with_one_line(stock, toy_data, tmp_path):
    data, checkpoint = stock
    # the data binarised with its own (separate) dictionaries, not the checkpoint's joined one
    argv = tiny_train_args(toy_data / "bin", tmp_path / "a", "--arch", "pgn_transformer", updates=2)
    proc = run_cli("fairseq-train", *argv, "--finetune-from-model", checkpoint, check=False)
    assert proc.returncode == 2 and "the data's dictionaries are not" in proc.stderr.splitlines()[-1]
    assert "--srcdict" in proc.stderr.splitlines()[-1] and "Traceback" not in proc.stderr
    # a checkpoint of another architecture
    other = tmp_path / "lstm.pt"
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    state["cfg"]["model"].arch = state["cfg"]["model"]._name = "lstm"
    torch.save(state, other)
    argv = tiny_train_args(data, tmp_path / "b", "--arch", "pgn_transformer", updates=2)
    proc = run_cli("fairseq-train", *argv, "--finetune-from-model", other, check=False)
    assert proc.returncode == 2 and "a lstm model" in proc.stderr.splitlines()[-1]
    assert not os.path.exists(tmp_path / "b" / "checkpoint_last.pt")
    # a file that is no checkpoint, and a directory
    (tmp_path / "notes.pt").write_text("not a checkpoint\n")
    for path, message in ((tmp_path / "notes.pt", "not a checkpoint torch can read"), (tmp_path, "a directory")):
        proc = run_cli("fairseq-train", *argv, "--finetune-from-model", path, check=False)
        assert proc.returncode == 2 and f"{path}: {message}" in proc.stderr.splitlines()[-1]


def test_a_dictionary_of_the_same_size_in_another_order_is_refused(stock, toy_data, tmp_path):
    """The symbols are compared with the pretrained model's dictionary (next to it or in its training data), not only
    their number."""
    data, checkpoint = stock
    words = (data / "dict.src.txt").read_text().splitlines()
    words[0], words[1] = words[1], words[0]  # the same words, two of them swapped
    (tmp_path / "dict.txt").write_text("".join(w + "\n" for w in words))
    dictionary = ("--srcdict", tmp_path / "dict.txt", "--tgtdict", tmp_path / "dict.txt")
    binarise(toy_data, tmp_path / "bin", *dictionary)
    argv = tiny_train_args(tmp_path / "bin", tmp_path / "a", "--arch", "pgn_transformer", updates=2)
    proc = run_cli("fairseq-train", *argv, "--finetune-from-model", checkpoint, check=False)
    first, second = (w.split()[0] for w in words[:2])
    expected = f"encoder symbol 4 is {first!r} here, {second!r} in {data / 'dict.src.txt'} (the same size"
    assert proc.returncode == 2 and expected in proc.stderr.splitlines()[-1] and "Traceback" not in proc.stderr


def test_without_its_dictionaries_only_the_sizes_are_checked(stock, tmp_path, caplog):
    data, checkpoint = stock
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    state["cfg"]["task"]["data"] = str(tmp_path / "gone")  # (a dataclass task's options: a dict)
    alone = tmp_path / "alone" / "model.pt"
    alone.parent.mkdir()
    torch.save(state, alone)
    with caplog.at_level("WARNING"):
        fine_tuned(data, alone, "--arch", "pgn_transformer")
    assert [r.getMessage() for r in caplog.records if r.name == PRETRAINED_LOG and r.levelname == "WARNING"] == [
        f"{alone}: no dictionary of its encoder and decoder found (dict.LANG.txt, dict.txt or dictionary.txt next "
        "to it or in its training data directory): only the dictionaries' sizes are checked against its embeddings, "
        "not their words"
    ]


def test_weights_that_do_not_fit_the_model_are_refused_in_one_line(stock, tmp_path):
    data, checkpoint = stock
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    state["model"]["decoder.layers.0.fc1.weight"] = state["model"]["decoder.layers.0.fc1.weight"][:32]
    torch.save(state, tmp_path / "bad.pt")
    argv = tiny_train_args(data, tmp_path / "run", "--arch", "pgn_transformer", updates=2, validation=False)
    proc = run_cli("fairseq-train", *argv, "--finetune-from-model", tmp_path / "bad.pt", check=False)
    expected = (
        "fairseq-train: error: the pretrained weights do not fit the model: decoder.layers.0.fc1.weight: (32, 64) in "
        "the checkpoint, (64, 64) here"
    )
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1] == expected and "Traceback" not in proc.stderr


def test_a_gate_bias_that_is_no_number_is_refused(stock, tmp_path):
    from fairseq_lexical.models.pretrained import PretrainedCheckpointError

    data, checkpoint = stock
    argv = tiny_train_args(data, tmp_path, "--arch", "pgn_transformer", updates=2, validation=False)
    proc = run_cli("fairseq-train", *argv, "--finetune-from-model", checkpoint, "--pretrained-gate-bias", "nan",
                   check=False)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error: --pretrained-gate-bias nan: expected a finite number" in proc.stderr.splitlines()[-1]
    for bias in ("inf", "-inf"):
        with pytest.raises(PretrainedCheckpointError, match=f"--pretrained-gate-bias {bias}: expected a finite"):
            fine_tuned(data, checkpoint, "--arch", "pgn_transformer", f"--pretrained-gate-bias={bias}")


def test_a_gate_bias_where_fp32_cannot_train_the_gate_is_warned(stock, caplog):
    """Beyond GATE_BIAS_SATURATION (16.6) sigmoid is 1 in fp32 and the gate gets no gradient (from 18 on exactly 0);
    beyond its negative the pretrained distribution is dropped. One warning each; none within the range."""
    from fairseq_lexical.models.pretrained import GATE_BIAS_SATURATION

    data, checkpoint = stock
    sample = batch(data)

    def gate_gradient(bias):
        caplog.clear()
        model, _ = fine_tuned(data, checkpoint, "--arch", "pgn_transformer", f"--pretrained-gate-bias={bias}")
        out = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(out, log_probs=True)
        lprobs.gather(-1, sample["target"].unsqueeze(-1)).sum().backward()
        gate = model.decoder.lexical_head.gate
        warnings = [r.getMessage() for r in caplog.records if r.name == PRETRAINED_LOG and r.levelname == "WARNING"]
        return gate.weight.grad.abs().max().item() + gate.bias.grad.abs().max().item(), warnings

    assert 16 < GATE_BIAS_SATURATION < 17
    with caplog.at_level("WARNING"):
        for bias in ("6.9", "16", "-16"):
            gradient, warnings = gate_gradient(bias)
            assert gradient > 0 and warnings == [], bias
        gradient, warnings = gate_gradient("30")
        assert gradient == 0 and len(warnings) == 1
        assert warnings[0].startswith("--pretrained-gate-bias 30: p_gate = sigmoid(30) is 1 in fp32")
        _, warnings = gate_gradient("-30")
        assert len(warnings) == 1 and warnings[0].startswith("--pretrained-gate-bias -30: p_gate = sigmoid(-30) <")


# ------------------------------------------------------------------------------------- the multilingual families
# mBART: an mbart_large of tiny sizes under translation_from_pretrained_bart (the plugin's copy of the task: fairseq
# 0.12's own stops with an AttributeError, facebookresearch/fairseq#4479); NLLB / M2M-100: a transformer_tiny trained
# by stock fairseq under translation_multi_simple_epoch with language tokens on both sides.
TINY_MBART = ("--encoder-layers", 1, "--decoder-layers", 1, "--encoder-embed-dim", 16, "--decoder-embed-dim", 16,
              "--encoder-ffn-embed-dim", 32, "--decoder-ffn-embed-dim", 32, "--encoder-attention-heads", 2,
              "--decoder-attention-heads", 2, "--encoder-normalize-before", "--decoder-normalize-before")  # fmt: skip
FAMILIES = {
    "mbart": dict(
        languages=("en_XX", "ro_RO"),
        task=("--langs", "en_XX,ro_RO", "--source-lang", "en_XX", "--target-lang", "ro_RO"),
        plugin_task="lexical_translation_from_pretrained_bart",
        stock_task="lexical_translation_from_pretrained_bart",
        arch=("--arch", "mbart_large", *TINY_MBART),
        source_token="[en_XX]",
        control=("[en_XX]", "[ro_RO]", "<mask>"),
    ),
    "nllb": dict(
        languages=("en", "xx"),
        task=("--lang-pairs", "en-xx", "--encoder-langtok", "src", "--decoder-langtok")
        + ("--source-lang", "en")
        + ("--target-lang", "xx"),
        plugin_task="lexical_translation_multi_simple_epoch",
        stock_task="translation_multi_simple_epoch",
        arch=("--arch", "transformer_tiny", "--share-all-embeddings"),
        source_token="__en__",
        control=("__en__", "__xx__"),
    ),
}


def family_data(spec, toy_data, root):
    """ROOT/bin: the toy corpus under the family's language codes, binarised with one joined dictionary."""
    for split in ("train", "valid", "test"):
        for side, language in zip(("src", "tgt"), spec["languages"]):
            os.symlink(toy_data / f"{split}.{side}", root / f"{split}.{language}")
    binarise(root, root / "bin", "--joined-dictionary", languages=spec["languages"])


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, toy_data, tmp_path_factory):
    """(its FAMILIES entry, joined data-bin, the stand-in pretrained checkpoint)."""
    spec = FAMILIES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    family_data(spec, toy_data, root)
    plugin = spec["stock_task"].startswith("lexical_")
    argv = tiny_train_args(root / "bin", root / "ckpt", "--task", spec["stock_task"], *spec["task"], *spec["arch"],
                           updates=UPDATES, seed=2, validation=False, criterion="label_smoothed_cross_entropy",
                           user_dir=USER_DIR if plugin else None)  # fmt: skip
    run_cli("fairseq-train", *argv)
    return spec, root / "bin", root / "ckpt" / "checkpoint_last.pt"


def test_each_family_starts_from_its_pretrained_distribution(family):
    """Every pretrained weight unchanged, p within 1 - p_gate of the pretrained model's at step 0, and with the gate
    shut the copy puts no mass on a language token (the source's is the <unk> sink)."""
    from fairseq import checkpoint_utils

    spec, data, checkpoint = family
    options = ("--task", spec["plugin_task"], *spec["task"], "--arch", "pgn_transformer")
    model, state = fine_tuned(data, checkpoint, *options)
    own = model.state_dict()
    assert all(torch.equal(own[name], value) for name, value in state.items())
    assert {n for n in own if n not in state} == {n for n in own if n.startswith("decoder.lexical_head.")}

    (reference,), _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    reference.eval()
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(8)])["net_input"]
    source = task.source_dictionary
    assert (sample["src_tokens"] == source.index(spec["source_token"])).any()  # the data holds the token
    with torch.no_grad():
        p_stock = reference.get_normalized_probs(reference(**sample), log_probs=False)
        p = model.get_normalized_probs(model(**sample), log_probs=False)
        difference = (p.float() - p_stock.float()).abs().max().item()
        assert 0 < difference <= 1 - torch.sigmoid(torch.tensor(6.9)).item() + 1e-6
        model.decoder.lexical_head.gate.bias.fill_(-50.0)  # p = the copy distribution alone
        copy = model.get_normalized_probs(model(**sample), log_probs=False)
    control = [task.target_dictionary.index(t) for t in spec["control"]]
    assert all(i != task.target_dictionary.unk() for i in control)
    assert copy[..., control].max().item() < 1e-12  # only p_write's share, sigmoid(-50) of it
    assert copy[..., task.target_dictionary.unk()].min().item() > 0  # the attention on the source's token


def test_each_family_fine_tunes_and_generates_with_its_language_tokens(family, tmp_path):
    spec, data, checkpoint = family
    task = ("--task", spec["plugin_task"], *spec["task"])
    argv = tiny_train_args(data, tmp_path, *task, "--arch", "pgn_transformer", updates=10, validation=False)
    run_cli("fairseq-train", *argv, "--finetune-from-model", checkpoint)
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    assert state["decoder.lexical_head.gate.weight"].abs().max() > 0  # the gate learned
    terms = tmp_path / "terms.tsv"
    terms.write_text("a1\tB2\t1\n")
    search = (*task, "--beam", "2", "--batch-size", "8", "--max-len-b", "12", "--lexicon-override", terms)
    proc = run_cli("fairseq-generate", *tiny_generate_args(data, tmp_path / "checkpoint_last.pt", *search))
    sources = [line.split("\t")[1].split() for line in proc.stdout.splitlines() if line.startswith("S-")]
    hypotheses = [line for line in proc.stdout.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == len(sources) == 20
    assert all(spec["source_token"] in tokens for tokens in sources)  # the task puts it there
    assert f"--lexicon-override {terms}: 1 source words get their rows" in proc.stderr
    # the hub: the checkpoint's own task (its language tokens), the keep-best search
    from fairseq.models import MODEL_REGISTRY

    languages = dict(zip(("source_lang", "target_lang"), spec["languages"]))
    hub = MODEL_REGISTRY["lex_transformer"].from_pretrained(str(tmp_path), "checkpoint_last.pt", str(data), **languages)
    assert type(hub.task).__name__.startswith("LexicalTranslation")
    assert hub.translate("a1 twice", beam=2, max_len_b=6).split()
    # a term on a language token is refused by file and line (fairseq-generate strips them from the output)
    terms.write_text(f"a1\t{spec['control'][1]}\t1\n")
    proc = run_cli("fairseq-generate", *tiny_generate_args(data, tmp_path / "checkpoint_last.pt", *search), check=False)
    assert proc.returncode == 2 and f"{terms}:1: target '{spec['control'][1]}' is a language token" in proc.stderr


def test_a_dictionary_without_the_language_tokens_is_named(tmp_path_factory, tmp_path, toy_data):
    """The multilingual checkpoint fine-tuned under --task translation: its dictionaries lack the language tokens
    that translation_multi_simple_epoch adds as it loads them."""
    spec = FAMILIES["nllb"]
    root = tmp_path_factory.mktemp("nllb_plain")
    family_data(spec, toy_data, root)
    stock = ("--task", spec["stock_task"], *spec["task"], *spec["arch"])
    argv = tiny_train_args(root / "bin", root / "ckpt", *stock, updates=2, validation=False,
                           criterion="label_smoothed_cross_entropy", user_dir=None)  # fmt: skip
    run_cli("fairseq-train", *argv)
    argv = tiny_train_args(root / "bin", tmp_path, "--source-lang", "en", "--target-lang", "xx", "--arch",
                           "pgn_transformer", updates=2)  # fmt: skip
    proc = run_cli("fairseq-train", *argv, "--finetune-from-model", root / "ckpt" / "checkpoint_last.pt", check=False)
    last = proc.stderr.splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "the 2 more are most likely its language tokens" in last and "--lang-pairs en-xx" in last


def test_each_family_refuses_its_languages_in_another_order(family):
    """The same dictionaries and as many language tokens, but in another order: other token ids."""
    from fairseq_lexical.models.pretrained import PretrainedCheckpointError

    spec, data, checkpoint = family
    languages = ",".join(reversed(spec["languages"]))
    options = ("--task", spec["plugin_task"], *spec["task"], "--langs", languages, "--arch", "pgn_transformer")
    with pytest.raises(PretrainedCheckpointError) as refused:
        fine_tuned(data, checkpoint, *options)
    message = str(refused.value)
    # its first language token where the data's dictionary has the other language's
    assert (
        f"is {spec['control'][0]!r}, added by its task (--task {spec['stock_task']}), {spec['control'][1]!r} here"
        in message
    )
    assert message.endswith("give the task the same languages in the same order (docs/pretrained.md)")


@pytest.mark.parametrize("task", ["lexical_translation_from_pretrained_bart", "lexical_translation_multi_simple_epoch"])
def test_the_families_tasks_take_the_generation_options(toy_data, task, capsys):
    import fairseq_lexical
    from fairseq import options

    fairseq_lexical.register()
    argv = [str(toy_data / "bin"), "--task", task, "--beam-search", "fairseq", "--lexicon-override-gate-bias", "2"]
    args = options.parse_args_and_arch(options.get_generation_parser(), argv)
    assert (args.beam_search, args.lexicon_override, args.lexicon_override_gate_bias) == ("fairseq", None, 2.0)
    with pytest.raises(SystemExit) as stop:
        options.parse_args_and_arch(options.get_generation_parser(), argv[:3] + ["--beam-search", "bogus"])
    assert stop.value.code == 2 and "invalid choice: 'bogus'" in capsys.readouterr().err
