"""fairseq_lexical.analysis.explain and tools/explain.py: per output token p_gate, the write and lexicon branches
(their sum is the model's own p(y)), the source position with the most lexical mass and the lexicon entry used;
the JSON lines and the HTML page (rendered with headless Chromium where it is installed)."""

import html
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.helpers.toy_data import LEXICON
from tests.helpers.environment import REPO, USER_DIR, run_cli
from tests.helpers.tiny_runs import TOY_LEXICON, tiny_spec
from tests.helpers.models import build_model
from tests.helpers.model_checks import toy_batch

TOOL = os.path.join(REPO, "tools", "explain.py")
PAIRS = [("a1 twice and a2", "B1 B1 B2"), ("a3 and a4 twice", "B3 B4 B4")]
# (extra model options, what they exercise): fairseq's LSTM decoder with eq. 6's sigmoid gate; the authors' decoder
# with the copy-token gate; the Transformer head; soft rows (several targets per row, tau > 0); the uniform lexicon
MODELS = {
    "lstm_sigmoid": ("--arch", "lex_lstm_small"),
    "lstm_copy_token": (
        "--arch",
        "lex_lstm_small",
        "--decoder-output",
        "combined",
        "--gate-form",
        "copy-token",
        "--gate-features",
        "output",
    ),
    "transformer": ("--arch", "lex_transformer_tiny"),
    "lstm_soft_rows": ("--arch", "lex_lstm_small", "--lexicon-temperature", "0.5", "--lexicon-top-k", "3"),
}


def soft_lexicon(toy_data):
    """Two entries per row (aX -> BX, score 2; aX -> B(X+1), score 1): soft rows at tau > 0."""
    path = toy_data / "lexicon_two_per_row.tsv"
    if not path.exists():
        words = sorted(LEXICON)
        with open(path, "w") as f:
            for k, w in enumerate(words):
                f.write(f"{w}\t{LEXICON[w]}\t2\n{w}\t{LEXICON[words[(k + 1) % len(words)]]}\t1\n")
    return path


def build(toy_data, options, lexicon=None):
    torch.manual_seed(0)
    model, task, _ = build_model(
        toy_data / "bin", *options, "--lexicon", lexicon or toy_data / "lexicon.tsv", "--dropout", "0"
    )
    model.eval()
    return model, task


def batched_model_output(model, task, pairs):
    """log p(y_t) and extra output of the model's own forward on a fairseq-collated (left-padded) batch."""
    sample = toy_batch(task, pairs)
    with torch.no_grad():
        out = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(out, log_probs=True)
    return sample, lprobs, out[1]


def explain_pairs(model, task, pairs):
    from fairseq_lexical.analysis import explain as E

    sd, td = task.source_dictionary, task.target_dictionary
    return [
        E.explain_pair(
            model,
            task,
            sd.encode_line(s, add_if_not_exist=False).long(),
            td.encode_line(t, add_if_not_exist=False).long(),
            reference=t,
        )
        for s, t in pairs
    ]


# -- in-process, untrained models ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
def test_branches_sum_to_the_models_probability_and_gate_is_the_decoders(toy_data, name):
    """write + lexicon = exp(log p) of the model's own batched forward; p_gate = the decoder's extra['p_gate']."""
    model, task = build(toy_data, MODELS[name], lexicon=soft_lexicon(toy_data) if name == "lstm_soft_rows" else None)
    explained = explain_pairs(model, task, PAIRS)
    sample, lprobs, extra = batched_model_output(model, task, PAIRS)
    target = sample["target"]
    for b, ex in enumerate(explained):
        # the batch is sorted by source length: find this pair's row
        row = int((sample["id"] == b).nonzero())
        assert [t.token for t in ex.tokens] == PAIRS[b][1].split() + ["</s>"]
        for tok in ex.tokens:
            y = int(target[row, tok.position])
            p_model = math.exp(float(lprobs[row, tok.position, y]))
            assert tok.write + tok.lexicon == pytest.approx(p_model, rel=1e-4, abs=1e-7)
            assert tok.p == pytest.approx(p_model, rel=1e-4)
            assert tok.p_gate == pytest.approx(float(extra["p_gate"][row, tok.position]), abs=1e-5)
            assert 0.0 <= tok.write <= tok.p_gate + 1e-7 and 0.0 <= tok.lexicon <= 1.0 - tok.p_gate + 1e-7
            assert tok.origin == ("lexicon" if tok.lexicon > tok.write else "written")


def test_source_position_and_entry_are_the_argmax_of_lexical_mass(toy_data):
    """Each B word of the toy lexicon (aX -> BX, weight 1 at tau = 0) comes from the aX with the most attention
    among the positions holding aX, through the entry aX -> BX with weight 1; the mass is attention x weight."""
    from fairseq_lexical.analysis import gates

    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    (ex,) = explain_pairs(model, task, [PAIRS[0]])
    src_ids, _ = gates.encode_tokens(PAIRS[0][0], task.source_dictionary, "source")
    tgt_ids, _ = gates.encode_tokens(PAIRS[0][1], task.target_dictionary, "target")
    attn, gate = gates.extract_arrays(model, src_ids, tgt_ids, task.target_dictionary.eos())  # plot_gates' reader
    inverse = {v: k for k, v in LEXICON.items()}
    for tok in ex.tokens[:-1]:
        word = inverse[tok.token]
        positions = [j for j, w in enumerate(ex.source_tokens) if w == word]
        expected = max(positions, key=lambda j: attn[tok.position, j])
        assert tok.source_position == expected and tok.source_word == word
        assert (tok.entry.source, tok.entry.target, tok.entry.weight) == (word, tok.token, pytest.approx(1.0))
        assert tok.attention == pytest.approx(float(attn[tok.position, expected]), abs=1e-6)
        assert tok.lexical_mass == pytest.approx(tok.attention * tok.entry.weight, rel=1e-6)
        # with one entry of weight 1 per word, p_lex(y) is the attention on the positions holding its word
        p_lex = float(sum(attn[tok.position, j] for j in positions))
        assert tok.lexicon == pytest.approx((1.0 - gate[tok.position]) * p_lex, rel=1e-5)


def test_uniform_rows_spread_their_mass(toy_data):
    """--lexicon uniform: every row is uniform over the ordinary target words; the entry weight is 1 / their count
    and the branches still add up to the model's probability."""
    model, task = build(toy_data, ("--arch", "lex_lstm_small"), lexicon="uniform")
    (ex,) = explain_pairs(model, task, [PAIRS[0]])
    sample, lprobs, _ = batched_model_output(model, task, [PAIRS[0]])
    support = int((model.decoder.lexical_head.uniform_target_dist > 0).sum())
    for tok in ex.tokens[:-1]:
        assert tok.write + tok.lexicon == pytest.approx(
            math.exp(float(lprobs[0, tok.position, sample["target"][0, tok.position]])), rel=1e-4
        )
        assert tok.entry is not None and tok.entry.weight == pytest.approx(1.0 / support)


def test_a_model_that_masks_a_word_at_inference_has_renormalised_branches(toy_data, monkeypatch):
    """Where the model's output sets a word's probability to 0 and renormalises the rest (as a decoder masking
    <unk> does), both branches are divided by the mass left: they add up to that output's p(y)."""
    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    unk = task.target_dictionary.unk()
    plain = model.get_normalized_probs

    def masking_unk(net_output, log_probs, sample=None):
        lp = plain(net_output, log_probs=True, sample=sample).clone()
        lp[..., unk] = float("-inf")
        lp = lp - torch.logsumexp(lp, dim=-1, keepdim=True)
        return lp if log_probs else lp.exp()

    unmasked = explain_pairs(model, task, [PAIRS[0]])[0]
    monkeypatch.setattr(model, "get_normalized_probs", masking_unk)
    (ex,) = explain_pairs(model, task, [PAIRS[0]])
    sample, lprobs, _ = batched_model_output(model, task, [PAIRS[0]])
    for tok, before in zip(ex.tokens, unmasked.tokens):
        p_masked = math.exp(float(lprobs[0, tok.position, sample["target"][0, tok.position]]))
        assert tok.write + tok.lexicon == pytest.approx(p_masked, rel=1e-4)
        assert tok.renormalization > 1.0 and before.renormalization == 1.0
        assert tok.write == pytest.approx(before.write * tok.renormalization, rel=1e-6)
        assert tok.p_gate == before.p_gate and tok.source_position == before.source_position


def with_mass_on_unk(model, task, gate_bias, leak=0.0, word="and"):
    """The model at inference (<unk> masked) with p_gate = sigmoid(gate_bias) at every step and all attention but
    ``leak`` (on the last position, </s>, whose row is </s>) on the first source position, meant for ``word``, a
    source word without a lexicon entry (its row is <unk>): the mixture's mass then sits on <unk> but for about
    p_gate + leak (issue 70, item 11)."""
    head = model.decoder.lexical_head
    assert head.lexical_probs(torch.ones(1, 1, 1), torch.tensor([[task.source_dictionary.index(word)]]))[
        0, 0, task.target_dictionary.unk()
    ] == pytest.approx(1.0)
    model.make_generation_fast_()
    with torch.no_grad():
        head.gate.weight.zero_()
        head.gate.bias.fill_(gate_bias)

    def attention_on_the_first_word(module, args):
        write_logits, gate_features, attn, src_tokens = args
        attn = torch.zeros_like(attn)
        attn[..., 0], attn[..., -1] = 1.0 - leak, leak
        return write_logits, gate_features, attn, src_tokens

    head.register_forward_pre_hook(attention_on_the_first_word)
    return model


def test_a_step_with_all_but_a_trace_of_the_mass_on_unk_is_explained(toy_data):
    """Issue 70, item 11: with p_gate = 1e-13 and the lexicon's mass on <unk>, which generation masks, the mass
    left for the other words is about p_gate: fp32's 1 - p(<unk>) rounded it to 0 (ZeroDivisionError); the branches
    are the written rest, renormalised, and add up to the model's p."""
    from fairseq_lexical.analysis.explain import token_title

    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    with_mass_on_unk(model, task, gate_bias=-30.0)
    (ex,) = explain_pairs(model, task, [("and a1", "B1")])
    for tok in ex.tokens:
        assert tok.p_gate == pytest.approx(1.0 / (1.0 + math.exp(30.0)), rel=1e-5)
        assert tok.lexicon == 0.0 and tok.write == pytest.approx(tok.p, rel=1e-4) and tok.origin == "written"
        assert tok.renormalization > 1e12
        assert "never outputs at inference (<unk>) is removed" in token_title(tok)


def test_a_step_with_the_whole_mass_on_unk_is_an_error_naming_the_token(toy_data):
    """With p_gate = 0 in float64 nothing at all is left beside the masked word: the model's numbers are not
    defined, an ExplainError saying so for that token (not a ZeroDivisionError, nor a 'do not reproduce' that
    blames the head)."""
    from fairseq_lexical.analysis import explain as E

    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    with_mass_on_unk(model, task, -800.0)
    message = (
        r"token 0 \('B1'\): the mixture puts its whole mass on words the model never outputs at inference "
        r"\(<unk>; p_gate = 0\)"
    )
    with pytest.raises(E.ExplainError, match=message):
        explain_pairs(model, task, [("and a1", "B1")])


@pytest.mark.parametrize("gate_bias, leak", [(-200.0, 0.0), (-30.0, 1e-9)], ids=["p_gate=e^-200", "leak=1e-9"])
def test_a_step_with_all_but_e_minus_200_of_the_mass_on_unk_is_explained(toy_data, gate_bias, leak):
    """All but e^-200 (p_gate) or 1e-9 (a trace of attention on </s>) of the mixture's mass on <unk>, which
    generation masks: the model's fp32 renormalisation made every word +inf or summed to 1e4 before it divided by
    the kept words' own sum; now the branches, renormalised in float64, add up to the model's p."""
    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    with_mass_on_unk(model, task, gate_bias, leak)
    (ex,) = explain_pairs(model, task, [("and a1", "B1")])
    for tok in ex.tokens:
        assert 0.0 < tok.p <= 1.0 and tok.write + tok.lexicon == pytest.approx(tok.p, rel=1e-4)


def test_a_hypothesis_with_a_word_the_model_never_outputs_is_an_error_naming_it(toy_data):
    from fairseq_lexical.analysis import explain as E

    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    model.make_generation_fast_()
    with pytest.raises(E.ExplainError, match=r"token 1 \('<unk>'\): the model never outputs this word at inference"):
        explain_pairs(model, task, [("a1 and a2", "B1 <unk>")])


def test_model_without_lexical_head_is_refused(toy_data):
    from fairseq_lexical.analysis import explain as E

    model, task = build(toy_data, ("--arch", "lstm_plain_small"), lexicon="none")
    with pytest.raises(E.ExplainError, match="no lexical head"):
        explain_pairs(model, task, [PAIRS[0]])


def test_numbers_that_do_not_add_up_are_an_error(toy_data, monkeypatch):
    """A head whose recomputed branches differ from the model's output (here: p_lex scaled behind the model's
    back) stops the explanation instead of printing wrong numbers."""
    from fairseq_lexical.analysis import explain as E

    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    head = model.decoder.lexical_head
    original = head.lexical_probs

    def scaled(attn, src_tokens):
        out = original(attn, src_tokens)
        rows_of_l = attn.size(1) == attn.size(2) and torch.equal(attn[0], torch.eye(attn.size(1)))
        return out if rows_of_l else 0.5 * out

    monkeypatch.setattr(head, "lexical_probs", scaled)
    with pytest.raises(E.ExplainError, match="do not reproduce"):
        explain_pairs(model, task, [PAIRS[0]])


# -- the page ----------------------------------------------------------------------------------------------------


def _tok(position, token, origin, source_position=None, source_word=None, weight=None):
    from fairseq_lexical.analysis.explain import LexiconEntry, TokenExplanation

    lexicon, write = (0.8, 0.1) if origin == "lexicon" else (0.05, 0.85)
    return TokenExplanation(
        position=position,
        token=token,
        p=lexicon + write,
        log_p=math.log(lexicon + write),
        p_gate=0.2,
        write=write,
        lexicon=lexicon,
        origin=origin,
        lexicon_share=lexicon / (lexicon + write),
        renormalization=1.0,
        source_position=source_position,
        source_word=source_word,
        attention=None if weight is None else 0.9,
        lexical_mass=None if weight is None else 0.9 * weight,
        entry=None if weight is None else LexiconEntry(source_word, token, weight),
    )


def hand_made_sentences():
    from fairseq_lexical.analysis.explain import SentenceExplanation

    right = SentenceExplanation(
        source_tokens=["dax", "fep", "</s>"],
        output_tokens=["RED", "RED", "RED", "</s>"],
        tokens=[
            _tok(0, "RED", "lexicon", 0, "dax", 1.0),
            _tok(1, "RED", "written"),
            _tok(2, "RED", "written"),
            _tok(3, "</s>", "written"),
        ],
        sample_id=0,
        reference="RED RED RED",
        correct=True,
    )
    wrong = SentenceExplanation(
        source_tokens=["lug", "<x&y>", "</s>"],
        output_tokens=["BLUE", "<x&y>", "</s>"],
        tokens=[_tok(0, "BLUE", "lexicon", 0, "lug", 0.75), _tok(1, "<x&y>", "written"), _tok(2, "</s>", "written")],
        sample_id=1,
        reference="BLUE GREEN",
        correct=False,
    )
    return [right, wrong]


def test_page_lists_errors_first_and_names_source_and_entry(tmp_path):
    from fairseq_lexical.analysis.explain import render_html

    page = render_html(hand_made_sentences(), title="t")
    assert page.index('id="s1"') < page.index('id="s0"')  # the wrong sentence first
    assert "translated from &#x27;lug&#x27; (source position 0) by the lexicon entry lug -&gt; BLUE (L = 0.75)" in page
    assert "&lt;x&amp;y&gt;" in page and "<x&y>" not in page  # tokens are escaped
    assert page.count('class="tok lexicon"') == 2 + 1  # two lexicon tokens and the legend
    assert "1 wrong of 2 with a reference" in page


def test_page_says_why_a_sentence_was_not_explained_and_shows_the_others():
    from fairseq_lexical.analysis.explain import render_html, unexplained_sentence

    reason = "token 0 ('B1'): the mixture puts its whole mass on words the model never outputs at inference (<unk>)"
    broken = unexplained_sentence(["and", "a1", "</s>"], ["B1", "</s>"], reason, sample_id=2, reference="B1")
    assert broken.correct is True and broken.tokens == [] and broken.to_dict()["error"] == reason
    page = render_html([*hand_made_sentences(), broken], title="t")
    section = page[page.index('id="s2"') :]
    assert 'class="sentence correct unexplained"' in page and html.escape(reason) in section
    assert "and a1" in section and 'class="tok' not in section  # its words, uncoloured
    assert page.count('<section class="sentence') == 3 and 'class="tok lexicon"' in page  # the others explained
    assert "1 sentence(s) could not be explained" in page


def test_pages_of_explain_are_known_by_their_marker(tmp_path):
    """What --html may replace: a page render_html wrote (pages written before the marker by their formula line),
    never another file."""
    from fairseq_lexical.analysis.explain import PAGE_MARKER, is_explain_page, render_html

    page = render_html(hand_made_sentences(), title="t")
    files = {
        "page.html": page,
        "older_page.html": page.replace(PAGE_MARKER, ""),
        "other.html": "<!DOCTYPE html>\n<html><body>a report</body></html>\n",
        "lexicon.tsv": "a1\tB1\t1\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert PAGE_MARKER in page
    assert {name: is_explain_page(str(tmp_path / name)) for name in files} == {
        "page.html": True,
        "older_page.html": True,
        "other.html": False,
        "lexicon.tsv": False,
    }


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless Chromium here (Debian: apt-get install chromium)")


def run_chromium(*args):
    proc = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_page_renders_in_chromium(tmp_path):
    """The rendered DOM has the sentences in error-first order with the hover texts, and the screenshot shows
    the lexicon colour (orange) and the written colour (blue)."""
    from fairseq_lexical.analysis.explain import LEXICON_RGB, WRITTEN_RGB, render_html

    path = tmp_path / "page.html"
    path.write_text(render_html(hand_made_sentences(), title="explain test"), encoding="utf-8")
    dom = run_chromium("--dump-dom", path.as_uri())
    assert dom.index('id="s1"') < dom.index('id="s0"')
    assert "by the lexicon entry lug -&gt; BLUE" in dom and "written by the decoder" in dom
    png = tmp_path / "page.png"
    run_chromium(f"--screenshot={png}", "--window-size=900,500", path.as_uri())
    import matplotlib.image

    pixels = (matplotlib.image.imread(str(png))[..., :3] * 255).reshape(-1, 3)

    def share_near(rgb, tol=12):
        return float((np.abs(pixels - np.array(rgb)).max(axis=1) <= tol).mean())

    # full-strength chips of the legend at least (and the tokens, paler or stronger by their share)
    assert share_near(LEXICON_RGB) > 1e-4 and share_near(WRITTEN_RGB) > 1e-4


# -- tools/explain.py on a trained tiny model (slow) ------------------------------------------------------------


# lex_lstm_small trained 120 updates on the toy task, and fairseq-generate's output on its test split
EXPLAINED = tiny_spec(
    *("--arch", "lex_lstm_small", "--lexicon", TOY_LEXICON, "--required-batch-size-multiple", 1),
    updates=120,
    batch_size=10,
    validation=False,
)
SEARCH = ("--beam", "3", "--batch-size", "8", "--num-workers", "0")


@pytest.fixture(scope="module")
def trained(tiny_runs):
    """The TinyRun of EXPLAINED, decoded with SEARCH."""
    return tiny_runs(EXPLAINED, SEARCH)


def run_tool(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, TOOL, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def positional_scores(generate_txt):
    scores, hyps = {}, {}
    for line in generate_txt.splitlines():
        if line.startswith("P-"):
            key, text = line.split("\t", 1)
            scores[int(key[2:])] = [float(x) for x in text.split()]
        elif line.startswith("H-"):
            key, _, text = line.split("\t", 2)
            hyps[int(key[2:])] = text
    return scores, hyps


@pytest.mark.slow
def test_tool_numbers_equal_fairseq_generates_token_scores(toy_data, trained, tmp_path):
    """Over the test set: the branches add up to fairseq-generate's own positional scores (P lines, base 2, four
    decimals), the output tokens are its H lines, and the page is written."""
    r = run_tool(
        toy_data / "bin",
        "--path",
        trained.checkpoint,
        "--generate-output",
        trained.outputs[SEARCH],
        "--reference",
        toy_data / "test.tgt",
        "-o",
        tmp_path / "x.jsonl",
        "--html",
        tmp_path / "x.html",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rows = read_jsonl(tmp_path / "x.jsonl")
    scores, hyps = positional_scores(trained.generate(SEARCH))
    assert [row["sample_id"] for row in rows] == list(range(20))
    references = (toy_data / "test.tgt").read_text().splitlines()
    for row in rows:
        i = row["sample_id"]
        assert row["output_tokens"] == hyps[i].split() + ["</s>"]
        assert row["reference"] == references[i] and row["correct"] == (hyps[i] == references[i])
        for tok, bits in zip(row["tokens"], scores[i]):
            assert math.log2(tok["write"] + tok["lexicon"]) == pytest.approx(bits, abs=6e-5 + 1e-4 * abs(bits))
            if tok["entry"] is not None:
                assert tok["entry"]["source"] == row["source_tokens"][tok["source_position"]]
                assert tok["entry"]["target"] == tok["token"]
    page = (tmp_path / "x.html").read_text()
    assert page.count('<section class="sentence') == 20
    assert "warning" not in r.stderr


@pytest.mark.slow
def test_tool_decodes_raw_source_lines_like_fairseq_generate(toy_data, trained, tmp_path):
    r = run_tool(
        toy_data / "bin",
        "--path",
        trained.checkpoint,
        "--source",
        toy_data / "test.src",
        "--reference",
        toy_data / "test.tgt",
        "--beam",
        "3",
        "-o",
        tmp_path / "y.jsonl",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    _, hyps = positional_scores(trained.generate(SEARCH))
    rows = read_jsonl(tmp_path / "y.jsonl")
    assert [" ".join(row["output_tokens"][:-1]) for row in rows] == [hyps[i] for i in range(20)]
    assert all(row["score"] is not None for row in rows)


@pytest.mark.slow
def test_tool_reports_a_generate_output_of_another_model(toy_data, trained, tmp_path):
    """P lines that this checkpoint does not reproduce (here: one score changed) are reported, not ignored."""
    lines = trained.generate(SEARCH).splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("P-3\t"))
    head, scores = lines[k].split("\t")
    lines[k] = head + "\t" + " ".join(f"{float(s) - 1.0:.4f}" for s in scores.split())
    (tmp_path / "gen.txt").write_text("\n".join(lines) + "\n")
    r = run_tool(
        toy_data / "bin",
        "--path",
        trained.checkpoint,
        "--generate-output",
        tmp_path / "gen.txt",
        "-o",
        tmp_path / "z.jsonl",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "1 hypotheses have token scores (P lines) that differ" in r.stderr
    rows = read_jsonl(tmp_path / "z.jsonl")
    assert [bool(row["warnings"]) for row in rows] == [i == 3 for i in range(20)]


@pytest.mark.slow
def test_tool_takes_the_terms_fairseq_generate_took(toy_data, trained, tmp_path):
    """--lexicon-override: the tool explains fairseq-generate's output made with the same terms (its P lines agree),
    and without them it reports that they do not."""
    (word, target), (_, other) = list(LEXICON.items())[:2]
    terms = tmp_path / "terms.tsv"
    terms.write_text(f"{word}\t{other}\t1\n")
    gen = run_cli(
        "fairseq-generate",
        toy_data / "bin",
        "--user-dir",
        USER_DIR,
        "--path",
        trained.checkpoint,
        "--gen-subset",
        "test",
        "--task",
        "lexical_translation",
        "--lexicon-override",
        terms,
        "--lexicon-override-gate-bias",
        "3",
        "--beam",
        "3",
        "--batch-size",
        "8",
    )
    (tmp_path / "gen.txt").write_text(gen.stdout)
    assert gen.stdout != trained.generate(SEARCH)
    common = [toy_data / "bin", "--path", trained.checkpoint, "--generate-output", tmp_path / "gen.txt"]
    r = run_tool(*common, "--lexicon-override", terms, "--lexicon-override-gate-bias", "3", "-o", tmp_path / "t.jsonl")
    assert r.returncode == 0 and "differ" not in r.stderr, r.stderr[-3000:]
    entries = [tok["entry"] for row in read_jsonl(tmp_path / "t.jsonl") for tok in row["tokens"] if tok["entry"]]
    assert all(e["target"] == other for e in entries if e["source"] == word)
    assert any(e["source"] == word for e in entries)
    r = run_tool(*common, "-o", tmp_path / "u.jsonl")
    assert r.returncode == 0 and "have token scores (P lines) that differ" in r.stderr, r.stderr[-3000:]


@pytest.mark.slow
def test_hub_explain_matches_the_tool(toy_data, trained, tmp_path):
    """explain(hub, sentence): the hub's translation, and the same numbers as tools/explain.py."""
    from fairseq_lexical.analysis.explain import explain
    from fairseq_lexical.models.lex_lstm import LexLSTMModel

    hub = LexLSTMModel.from_pretrained(
        str(trained.dir), checkpoint_file="checkpoint_last.pt", data_name_or_path=str(toy_data / "bin")
    )
    sentence = (toy_data / "test.src").read_text().splitlines()[0]
    ex = explain(hub, sentence, beam=3)
    assert ex.translation == hub.translate(sentence, beam=3)
    (tmp_path / "one.src").write_text(sentence + "\n")
    r = run_tool(
        toy_data / "bin",
        "--path",
        trained.checkpoint,
        "--source",
        tmp_path / "one.src",
        "--beam",
        "3",
        "-o",
        tmp_path / "one.jsonl",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (row,) = read_jsonl(tmp_path / "one.jsonl")
    assert row["output_tokens"] == ex.output_tokens
    for a, b in zip(row["tokens"], ex.tokens):
        assert (a["p_gate"], a["write"], a["lexicon"], a["source_position"]) == pytest.approx(
            (b.p_gate, b.write, b.lexicon, b.source_position), rel=1e-5
        )
    several = explain(hub, [sentence, sentence], beam=3)
    assert len(several) == 2 and several[1].output_tokens == ex.output_tokens


def test_tool_names_a_missing_checkpoint(toy_data, tmp_path):
    r = run_tool(
        toy_data / "bin", "--path", tmp_path / "nope.pt", "--source", toy_data / "test.src", "-o", tmp_path / "x.jsonl"
    )
    assert r.returncode == 2 and "checkpoint not found" in r.stderr and "nope.pt" in r.stderr


def test_tool_refuses_to_write_over_its_input(toy_data, tmp_path):
    (tmp_path / "test.src").write_text((toy_data / "test.src").read_text())
    (tmp_path / "ckpt.pt").write_bytes(b"not read")
    r = run_tool(
        toy_data / "bin",
        "--path",
        tmp_path / "ckpt.pt",
        "--source",
        tmp_path / "test.src",
        "-o",
        tmp_path / "x.jsonl",
        "--html",
        tmp_path / "test.src",
    )
    assert r.returncode == 2 and "--html" in r.stderr and "same file as the input --source" in r.stderr
    assert (tmp_path / "test.src").read_text() == (toy_data / "test.src").read_text()


def test_tool_refuses_to_write_over_the_data_bin(toy_data, tmp_path):
    """Issue 55, defect 8: --html naming the data-bin's dictionary overwrote it."""
    (tmp_path / "ckpt.pt").write_bytes(b"not read")
    dictionary = toy_data / "bin" / "dict.tgt.txt"
    before = dictionary.read_bytes()
    r = run_tool(
        toy_data / "bin",
        "--path",
        tmp_path / "ckpt.pt",
        "--source",
        toy_data / "test.src",
        "-o",
        tmp_path / "x.jsonl",
        "--html",
        dictionary,
    )
    assert r.returncode == 2 and "same file as the input the data directory (dict.tgt.txt)" in r.stderr, r.stderr
    assert dictionary.read_bytes() == before


def test_loaded_models_are_prepared_as_fairseq_generate_prepares_them(toy_data, trained):
    """The tools decode with the model as fairseq-generate has it: its lexical head never generates <unk>."""
    from fairseq_lexical.analysis import gates

    ckpt = trained.checkpoint
    model, _ = gates.load_model(str(ckpt), str(toy_data / "bin"))
    assert model.decoder.lexical_head.masking_unk


# -- what the tool may write (issue 70, items 4 and 10) and the sentences it cannot explain (item 11) -----------


def only_error_line(stderr):
    """The one line of a refusal: no traceback, nothing else from the tool (fairseq's import may log)."""
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("INFO:")]
    assert "Traceback" not in stderr and len(lines) == 1, stderr[-3000:]
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--html", "-o"])
def test_tool_refuses_to_write_over_the_lexicon_the_checkpoint_names(toy_data, trained, tmp_path, option):
    """Issue 70, item 4: `--html WORK/lexicons/simple.tsv` wrote the page over the lexicon the checkpoint was
    trained with (the tool never reads it: the checkpoint holds L, so it was no input to protect). An existing file
    that the tool did not write is never replaced. (A copy of the checkpoint names a copy of the lexicon.)"""
    lexicon = tmp_path / "lexicon.tsv"
    lexicon.write_bytes((toy_data / "lexicon.tsv").read_bytes())
    state = torch.load(trained.checkpoint, map_location="cpu", weights_only=False)
    model_cfg = state["cfg"]["model"]
    if isinstance(model_cfg, dict):
        model_cfg["lexicon"] = str(lexicon)
    else:
        model_cfg.lexicon = str(lexicon)
    torch.save(state, tmp_path / "checkpoint.pt")
    outputs = {"-o": tmp_path / "x.jsonl", "--html": tmp_path / "x.html", option: lexicon}
    r = run_tool(
        toy_data / "bin",
        "--path",
        tmp_path / "checkpoint.pt",
        "--generate-output",
        trained.outputs[SEARCH],
        *[a for pair in outputs.items() for a in pair],
    )
    assert r.returncode == 2 and lexicon.read_bytes() == (toy_data / "lexicon.tsv").read_bytes()
    assert only_error_line(r.stderr) == (
        f"explain.py: error: {option} {lexicon} exists and was not written by this tool: refusing to replace it "
        "(remove it, or choose another path)"
    )
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "x.html").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "option, where, message",
    [
        ("--html", "folder", "{path} is a directory: give the file to write"),
        ("-o", "folder", "{path} is a directory: give the file to write"),
        ("--html", "file.txt/page.html", "{path}: {parent} is not a directory"),
    ],
)
def test_tool_refuses_an_output_path_it_cannot_write_in_one_line(toy_data, trained, tmp_path, option, where, message):
    """Issue 70, item 10: `--html <directory>` ended in a traceback after the whole run; now one line, at once."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("a file\n")
    path = tmp_path / where
    outputs = {"-o": tmp_path / "x.jsonl", "--html": tmp_path / "x.html", option: path}
    r = run_tool(
        toy_data / "bin",
        "--path",
        trained.checkpoint,
        "--generate-output",
        trained.outputs[SEARCH],
        *[a for pair in outputs.items() for a in pair],
    )
    expected = message.format(path=path, parent=tmp_path / "file.txt")
    assert r.returncode == 2 and only_error_line(r.stderr) == f"explain.py: error: {option} {expected}"
    assert (tmp_path / "file.txt").read_text() == "a file\n"


def test_tool_names_a_file_that_is_not_a_checkpoint_in_one_line(toy_data, tmp_path):
    (tmp_path / "ckpt.pt").write_bytes(b"not a checkpoint")
    r = run_tool(
        toy_data / "bin", "--path", tmp_path / "ckpt.pt", "--source", toy_data / "test.src", "-o", tmp_path / "x.jsonl"
    )
    assert r.returncode == 2, r.stderr[-3000:]
    assert only_error_line(r.stderr).startswith(f"explain.py: error: {tmp_path / 'ckpt.pt'}: not a loadable fairseq")


@pytest.mark.slow
def test_tool_replaces_its_own_earlier_outputs(toy_data, trained, tmp_path):
    """A second run over the first one's -o and --html (a page written before pages had their marker, too) writes
    them anew: a recipe's report is made again in the same folder."""
    from fairseq_lexical.analysis.explain import PAGE_MARKER, render_html

    earlier = hand_made_sentences()
    (tmp_path / "x.jsonl").write_text(
        "".join(json.dumps({"checkpoint": "old.pt", **s.to_dict()}) + "\n" for s in earlier), encoding="utf-8"
    )
    (tmp_path / "x.html").write_text(render_html(earlier, title="old").replace(PAGE_MARKER, ""), encoding="utf-8")
    r = run_tool(
        toy_data / "bin",
        "--path",
        trained.checkpoint,
        "--generate-output",
        trained.outputs[SEARCH],
        "-o",
        tmp_path / "x.jsonl",
        "--html",
        tmp_path / "x.html",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(read_jsonl(tmp_path / "x.jsonl")) == 20
    page = (tmp_path / "x.html").read_text()
    assert PAGE_MARKER in page and page.count('<section class="sentence') == 20


@pytest.mark.slow
def test_tool_reports_a_sentence_it_cannot_explain_and_goes_on(toy_data, trained, tmp_path, monkeypatch, capsys):
    """Issue 70, item 11: one sentence that cannot be explained (here: its step with the whole mass on <unk>) ended
    the run (exit 2, and the custom recipe's report with it); now its JSON line and its section of the page say why,
    and the other sentences are explained."""
    from tests.helpers.environment import program_module
    from fairseq_lexical.analysis import explain as E

    reason = "token 1 ('B3'): the mixture puts its whole mass on words the model never outputs at inference (<unk>)"
    real = E.explain_pair

    def failing_on_sentence_3(*args, sample_id=None, **kwargs):
        if sample_id == 3:
            raise E.ExplainError(reason)
        return real(*args, sample_id=sample_id, **kwargs)

    monkeypatch.setattr(E, "explain_pair", failing_on_sentence_3)
    rc = program_module("explain").main(
        [
            str(toy_data / "bin"),
            "--path",
            str(trained.checkpoint),
            "--generate-output",
            str(trained.outputs[SEARCH]),
            "--reference",
            str(toy_data / "test.tgt"),
            "-o",
            str(tmp_path / "x.jsonl"),
            "--html",
            str(tmp_path / "x.html"),
        ]
    )
    stderr = capsys.readouterr().err
    assert rc == 0, stderr[-3000:]
    assert (
        f"1 of 20 sentences could not be explained (the page and their JSON lines say why); sentence 3: {reason}"
        in (stderr)
    )
    rows = read_jsonl(tmp_path / "x.jsonl")
    _, hyps = positional_scores(trained.generate(SEARCH))
    assert [row["error"] for row in rows] == [reason if i == 3 else None for i in range(20)]
    assert rows[3]["tokens"] == [] and rows[3]["output_tokens"] == hyps[3].split() + ["</s>"]
    assert all(len(row["tokens"]) == len(row["output_tokens"]) for i, row in enumerate(rows) if i != 3)
    page = (tmp_path / "x.html").read_text()
    assert page.count('<section class="sentence') == 20 and page.count('<div class="row unexplained">') == 1
    assert html.escape(reason) in page


@pytest.mark.slow
def test_tool_fails_when_no_sentence_can_be_explained(toy_data, trained, tmp_path, monkeypatch, capsys):
    from tests.helpers.environment import program_module
    from fairseq_lexical.analysis import explain as E

    def failing(*args, **kwargs):
        raise E.ExplainError("the head's numbers do not reproduce the model's output")

    monkeypatch.setattr(E, "explain_pair", failing)
    args = [str(toy_data / "bin"), "--path", str(trained.checkpoint)]
    args += ["--generate-output", str(trained.outputs[SEARCH]), "-o", str(tmp_path / "x.jsonl")]
    assert program_module("explain").main(args) == 2
    assert "explain.py: error: no sentence could be explained; sentence 0: the head's numbers do not reproduce" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "x.jsonl").exists()
