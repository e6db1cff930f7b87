"""The HTML page of fairseq_lexical.analysis.explain (render_html): errors first, the source and lexicon entry of
each lexicon token, the sentences that could not be explained, the marker that tells its pages apart, and (with
headless Chromium where it is installed) the rendered DOM and colours."""

import html
import shutil
import subprocess

import numpy as np
import pytest

from tests.helpers.explanations import hand_made_sentences


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
