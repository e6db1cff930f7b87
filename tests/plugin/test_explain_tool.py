"""tools/explain.py on a trained tiny model: its numbers against fairseq-generate's token scores, its inputs (raw
source lines, another model's generate output, --lexicon-override's terms), the hub's explain, what it refuses to
write over and the sentences it cannot explain."""

import html
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers.environment import REPO, USER_DIR, run_cli
from tests.helpers.explanations import hand_made_sentences
from tests.helpers.tiny_runs import TOY_LEXICON, tiny_spec
from tests.helpers.toy_data import LEXICON

TOOL = os.path.join(REPO, "tools", "explain.py")


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
