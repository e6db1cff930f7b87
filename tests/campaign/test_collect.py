"""`tools/gpu_campaign.sh collect` refuses what a campaign cannot have produced, in one line naming the file and the
field (exit 2, no traceback, nothing written), and says which runs it leaves out of the mean and why (issue 70,
item 5); how it merges polls and where a variant's runs go."""

import json
import os

import pytest

from fairseq_lexical_recipes.campaign.__main__ import main
from fairseq_lexical_recipes.campaign.collect import CollectError, collect
from tests.helpers.campaign import result_file, run_record


def collect_cli(capsys, *argv):
    code = main(["collect", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, results, *argv):
    """collect's one-line error (exit 2) for these paths, with nothing written under results."""
    code, out, err = collect_cli(capsys, *argv, "--results", results)
    assert code == 2 and err.startswith("gpu_campaign collect: error: ") and err.count("\n") == 1, (out, err)
    assert not os.path.isdir(results) or os.listdir(results) == []
    return err


def a_poll(tmp_path, name, *runs, started=1000.0):
    return os.path.join(result_file(tmp_path / name, started, list(runs)), "results.json")


def saved(results, name="gpu_scan_jump_simple"):
    return json.loads((results / f"{name}.json").read_text())


@pytest.mark.parametrize(
    "score", [1.7, -0.3, True, "0.9", float("nan")], ids=["above_1", "negative", "bool", "str", "nan"]
)
def test_an_impossible_score_is_refused(tmp_path, capsys, score):
    run = dict(run_record(1, 0.9), score={"exact_match": score})
    poll = a_poll(tmp_path, "poll", run_record(2, 0.8), run)
    err = refused(capsys, tmp_path / "results", poll)
    assert f"{poll}: run scan_jump-simple-s1: score.exact_match " in err


def test_bleu_is_on_its_own_scale(tmp_path, capsys):
    run = dict(
        run_record(1, None), id="eng_cmn-simple-s1", group="eng_cmn", task="eng_cmn", split=None, score={"bleu": 24.5}
    )
    code, out, err = collect_cli(capsys, a_poll(tmp_path, "poll", run), "--results", tmp_path / "r")
    assert code == 0, err
    assert saved(tmp_path / "r", "gpu_eng_cmn_simple")["mean"] == 24.5 and "| 24.35 ± 0.09 | 24.50 ± 0.00" in out
    err = refused(capsys, tmp_path / "r2", a_poll(tmp_path, "poll2", dict(run, score={"bleu": 100.5})))
    assert "score.bleu 100.5 is not in [0, 100]" in err


def test_only_runs_that_reached_their_planned_updates_are_in_the_mean(tmp_path, capsys):
    short = dict(run_record(2, 0.1, updates=100), time_limited=False)  # says it was not time-limited, yet trained 100
    early = dict(run_record(4, 0.7, updates=5000), time_limited=False, training={"updates": 5000, "early_stop": True})
    skipped = dict(run_record(5, None, status="skipped"), reason="does not fit: needs about 12.0 min, 3.0 min left")
    poll = a_poll(tmp_path, "poll", run_record(1, 0.9), short, run_record(3, 0.2, updates=5000), early, skipped)
    code, out, err = collect_cli(capsys, poll, "--results", tmp_path / "r")
    assert code == 0, err
    d = saved(tmp_path / "r")
    assert d["seeds"] == [1, 4] and d["mean"] == pytest.approx(0.8)  # an early stop is the recipe's own end
    assert d["excluded"] == {"2": "stopped short: 100 of 8000 updates", "3": "time-limited: 5000 of 8000 updates"}
    assert (
        "gpu_scan_jump_simple.json: left out of the mean: seed 2 (stopped short: 100 of 8000 updates); "
        "seed 3 (time-limited: 5000 of 8000 updates)" in out
    )
    assert (
        "warning: not run (the lease ended or they did not fit), nothing collected: scan_jump-simple-s5 (does " in out
    )


@pytest.mark.parametrize(
    "change, field",
    [
        ({"training": {"updates": 99999, "early_stop": False}}, "training.updates 99999 is more than the plan's 8000"),
        ({"max_update": 100}, "max_update 100: the plan trains the run 8000 updates"),
        ({"split": "sideways"}, 'split "sideways": the plan\'s run scan_jump-simple-s1 has "jump"'),
        ({"model": "gpt5"}, 'model "gpt5": the plan\'s run scan_jump-simple-s1 has "simple"'),
        ({"id": "scan_jump-../../README-s1", "model": "../../README"}, "not a run of the plan 'paper'"),
        ({"seed": True}, "seed true: the plan's run scan_jump-simple-s1 has 1"),
        ({"status": "great"}, 'status "great" is not one of finished, failed, stopped, skipped'),
    ],
    ids=["updates", "max_update", "split", "model", "model_path", "seed", "status"],
)
def test_what_the_plan_does_not_have_is_refused(tmp_path, capsys, change, field):
    poll = a_poll(tmp_path, "poll", dict(run_record(1, 0.9), **change))
    err = refused(capsys, tmp_path / "results", poll)
    assert f"{poll}: run {change.get('id', 'scan_jump-simple-s1')}: {field}" in err


@pytest.mark.parametrize(
    "mutate, says",
    [
        (lambda res: res.pop("started"), "started is missing"),
        (lambda res: res.update(started="yesterday"), 'started "yesterday" is not a number'),
        (lambda res: res.update(runs=None), "runs is missing"),
        (lambda res: res.update(environment=None, runs=[run_record(1, 0.9)]), "environment is missing"),
        (lambda res: res.update(plan="bigger"), 'plan "bigger" is not one of paper, scan, width, mini'),
        (lambda res: res["runs"].append("a run"), 'runs[1] "a run" is not an object'),
        (lambda res: res["runs"][0].update(score=[0.9]), "run scan_jump-simple-s1: score [0.9] is not an object"),
        (lambda res: res["runs"][0].update(training="long"), 'training "long" is not an object'),
        (lambda res: res["runs"][0]["times"].update(train_s="5"), 'times.train_s "5" is not a number'),
        (lambda res: res["runs"][0].update(wall_s=-1), "wall_s -1 is negative"),
        (lambda res: res["runs"][0]["config"].update(commands=["x"]), 'config.commands ["x"] is not an object'),
        # issue 80, point 9: a whole number beyond a float's range was an OverflowError's traceback
        (lambda res: res["runs"][0]["training"].update(updates=10**400),
         f"run scan_jump-simple-s1: training.updates {str(10**400)[:57]}... is out of range"),
        (lambda res: res["runs"][0].update(wall_s=-(10**400)), "run scan_jump-simple-s1: wall_s -1000"),
        (lambda res: res.update(started=10**400), "started 1000000"),
        (lambda res: res["runs"][0]["score"].update(exact_match=10**400), "score.exact_match 1000"),
    ],
    ids=["no_started", "started_str", "no_runs", "no_environment", "plan", "run_str", "score_list", "training_str",
         "times_str", "negative_wall", "commands_list", "updates_10e400", "wall_minus_10e400", "started_10e400",
         "score_10e400"],
)  # fmt: skip
def test_a_malformed_results_file_is_one_line_naming_the_field(tmp_path, capsys, mutate, says):
    path = a_poll(tmp_path, "poll", run_record(1, 0.9))
    with open(path) as f:
        res = json.load(f)
    mutate(res)
    with open(path, "w") as f:
        json.dump(res, f)
    assert says in refused(capsys, tmp_path / "results", path)


@pytest.mark.parametrize(
    "text, says",
    [
        ("[" * 200_000 + "]" * 200_000, "not a JSON file (nested too deeply to read)"),
        ('{"runs": [{"id": "x", "wall_s": ' + "7" * 5001 + "}]}", "not a JSON file (a whole number of more than "),
        ('{"started": -' + "1" * 4301 + "}", "not a JSON file (a whole number of more than 4300 digits)"),
    ],
    ids=["nested_200000", "digits_5001", "digits_4301"],
)
def test_json_that_python_cannot_read_is_one_line_naming_the_file(tmp_path, capsys, text, says):
    """Issue 80, point 9: deep nesting (RecursionError) and Python's limit on an integer's digits (ValueError) were
    tracebacks."""
    path = tmp_path / "results.json"
    path.write_text(text)
    assert f"{path}: {says}" in refused(capsys, tmp_path / "results", path)


def test_a_results_json_that_cannot_be_read_is_one_line(tmp_path, capsys, monkeypatch):
    from lexical_offline import textio

    path = a_poll(tmp_path, "poll", run_record(1, 0.9))

    def unreadable(name, *args, **kwargs):
        raise PermissionError(13, "Permission denied", name)

    monkeypatch.setattr(textio, "open", unreadable, raising=False)  # as for a file of another user, root or not
    assert f"{path}: cannot read it (Permission denied)" in refused(capsys, tmp_path / "results", path)


@pytest.mark.parametrize("key", ["1" * 5001, "\u00b2", "01"], ids=["digits_5001", "superscript", "leading_zero"])
def test_a_seed_of_a_results_file_is_as_collect_writes_it(tmp_path, capsys, key):
    results = tmp_path / "results"
    assert collect_cli(capsys, a_poll(tmp_path, "poll1", run_record(1, 0.9)), "--results", results)[0] == 0
    text = (results / "gpu_scan_jump_simple.json").read_text().replace('"1": {', f'"{key}": {{', 1)
    (results / "gpu_scan_jump_simple.json").write_text(text)
    code, _, err = collect_cli(
        capsys, a_poll(tmp_path, "poll2", run_record(2, 0.5), started=2000.0), "--results", results
    )
    assert code == 2 and err.count("\n") == 1 and "gpu_scan_jump_simple.json: per_seed: " in err, err
    assert "is not a seed (a whole number, as collect writes it)" in err and len(err) < 300
    assert (results / "gpu_scan_jump_simple.json").read_text() == text


def test_a_perfect_score_is_accepted(tmp_path, capsys):
    """Issue 80, point 13d: the top of each metric's range is a score (exact match 1.0, BLEU 100)."""
    code, out, err = collect_cli(
        capsys, a_poll(tmp_path, "poll", run_record(1, 1.0), run_record(2, 1)), "--results", tmp_path / "r"
    )
    assert code == 0, err
    d = saved(tmp_path / "r")
    assert d["seeds"] == [1, 2] and d["mean"] == 1.0 and d["excluded"] == {}
    run = dict(
        run_record(1, None), id="eng_cmn-simple-s1", group="eng_cmn", task="eng_cmn", split=None, score={"bleu": 100}
    )
    code, out, err = collect_cli(capsys, a_poll(tmp_path, "poll2", run), "--results", tmp_path / "r2")
    assert code == 0, err
    assert saved(tmp_path / "r2", "gpu_eng_cmn_simple")["mean"] == 100.0 and "| 100.00 ± 0.00 (1 seeds)" in out


def test_a_file_that_is_no_object(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text("[1, 2]")
    assert f"{path}: the file [1, 2] is not a results.json" in refused(capsys, tmp_path / "results", path)


def test_a_seed_claimed_twice_is_refused_unless_replace(tmp_path, capsys):
    first = a_poll(tmp_path, "poll1", run_record(1, 0.9), started=1000.0)
    second = a_poll(tmp_path, "poll2", run_record(1, 0.3), run_record(2, 0.5), started=2000.0)
    results = tmp_path / "results"
    err = refused(capsys, results, second, first)  # the order of the paths does not matter: the campaigns' does
    assert (
        f"seed 1 is claimed twice: {first}: run scan_jump-simple-s1 completed it, {second}: run scan_jump-simple-s1 "
        "ran it again (complete too); --replace takes the later one" in err
    )
    code, out, err = collect_cli(capsys, second, first, "--results", results, "--replace")
    assert code == 0, err
    assert saved(results)["per_seed"]["1"]["exact_match"] == 0.3 and saved(results)["seeds"] == [1, 2]
    assert f"seed 1 of {first}: run scan_jump-simple-s1 replaced by {second}" in out


INCOMPLETE = {
    "failed": dict(run_record(1, None, status="failed"), reason="exit 1: CUDA error"),
    "stopped": dict(run_record(1, 0.95, status="stopped", updates=3000), reason="stopped on request (poll --stop)"),
    "time_limited": run_record(1, 0.95, updates=5000),
}


@pytest.mark.parametrize("how", sorted(INCOMPLETE))
def test_replace_never_takes_an_incomplete_run_over_a_complete_one_in_the_polls(tmp_path, capsys, how):
    """Issue 80, point 9: --replace took a failed run over the complete run of its seed."""
    first = a_poll(tmp_path, "poll1", run_record(1, 0.9), started=1000.0)
    second = a_poll(tmp_path, "poll2", INCOMPLETE[how], run_record(2, 0.5), started=2000.0)
    results = tmp_path / "results"
    err = refused(capsys, results, first, second)
    assert f"{second}: run scan_jump-simple-s1 ran it again (" in err and "); --replace keeps the complete one" in err
    code, out, err = collect_cli(capsys, first, second, "--results", results, "--replace")
    assert code == 0, err
    d = saved(results)
    assert d["seeds"] == [1, 2] and d["per_seed"]["1"]["exact_match"] == 0.9 and d["mean"] == pytest.approx(0.7)
    assert "superseded" not in d and "replaced by" not in out
    assert (
        f"seed 1: {first}: run scan_jump-simple-s1 completed it, {second}: run scan_jump-simple-s1 did not (" in out
        and "the complete one is kept (--replace takes only a complete run)" in out
    )


@pytest.mark.parametrize("how", sorted(INCOMPLETE))
def test_replace_never_takes_an_incomplete_run_over_a_complete_seed_of_the_file(tmp_path, capsys, how):
    results = tmp_path / "results"
    assert collect_cli(capsys, a_poll(tmp_path, "poll1", run_record(1, 0.9)), "--results", results)[0] == 0
    before = (results / "gpu_scan_jump_simple.json").read_bytes()
    later = a_poll(tmp_path, "poll2", INCOMPLETE[how], started=2000.0)
    for replace in ([], ["--replace"]):
        code, out, err = collect_cli(capsys, later, "--results", results, *replace)
        assert code == 0, err
        assert (results / "gpu_scan_jump_simple.json").read_bytes() == before
        assert f"seed 1 ({later}: run scan_jump-simple-s1 did not complete: " in out
        assert "complete there already, kept (--replace takes only a complete run)" in out
    complete = a_poll(tmp_path, "poll3", INCOMPLETE[how], run_record(2, 0.4), started=2000.0)  # other seeds are taken
    code, out, err = collect_cli(capsys, complete, "--results", results, "--replace")
    assert code == 0 and saved(results)["seeds"] == [1, 2] and saved(results)["per_seed"]["1"]["exact_match"] == 0.9


def test_two_polls_that_disagree_on_a_run_are_two_claims(tmp_path, capsys):
    a = a_poll(tmp_path, "poll1", run_record(1, 0.9))
    b = a_poll(
        tmp_path, "poll2", run_record(1, 0.9), dict(run_record(1, 0.4))
    )  # the same run (and campaign), another score
    assert "seed 1 is claimed twice" in refused(capsys, tmp_path / "results", a, b)
    same = a_poll(tmp_path, "poll3", run_record(1, 0.9))  # a later poll's copy of the same run is one run
    code, _, err = collect_cli(capsys, a, same, "--results", tmp_path / "results")
    assert code == 0 and saved(tmp_path / "results")["seeds"] == [1], err


def test_a_later_complete_run_supersedes_an_incomplete_one_in_the_same_collect(tmp_path, capsys):
    a = a_poll(tmp_path, "poll1", run_record(1, 0.1, updates=5000), started=1000.0)
    b = a_poll(tmp_path, "poll2", run_record(1, 0.9), started=2000.0)
    code, out, err = collect_cli(capsys, a, b, "--results", tmp_path / "r")
    assert code == 0, err
    d = saved(tmp_path / "r")
    assert d["seeds"] == [1] and [(x["seed"], x["updates"]) for x in d["superseded"]] == [(1, 5000)]
    assert "did not complete (time-limited: 5000 of 8000 updates): superseded by" in out


def test_collecting_the_same_polls_again_changes_nothing(tmp_path, capsys):
    poll = a_poll(tmp_path, "poll", run_record(1, 0.9), run_record(2, 0.2, updates=5000))
    results = tmp_path / "r"
    assert collect_cli(capsys, poll, "--results", results)[0] == 0
    before = saved(results)
    code, out, _ = collect_cli(capsys, poll, "--results", results)
    assert code == 0 and saved(results) == before and "superseded" not in before
    assert "superseded" not in out and "already" not in out


def test_files_are_written_all_or_none(tmp_path, capsys):
    results = tmp_path / "results"
    lstm = dict(run_record(1, 0.0), id="scan_jump-lstm-s1", model="lstm")
    assert collect_cli(capsys, a_poll(tmp_path, "poll1", lstm), "--results", results)[0] == 0
    before = (results / "gpu_scan_jump_lstm.json").read_bytes()
    (results / "gpu_scan_jump_simple.json").write_text('{"note": "by hand"}')  # the second file is refused
    lstm2 = dict(lstm, id="scan_jump-lstm-s2", seed=2)
    code, _, err = collect_cli(capsys, a_poll(tmp_path, "poll2", lstm2, run_record(1, 0.9)), "--results", results)
    assert code == 2 and "gpu_scan_jump_simple.json exists and was not written by collect: not touched" in err
    assert (results / "gpu_scan_jump_lstm.json").read_bytes() == before
    assert sorted(os.listdir(results)) == ["gpu_scan_jump_lstm.json", "gpu_scan_jump_simple.json"]  # no temporaries


def test_a_results_file_edited_by_hand_is_checked_too(tmp_path, capsys):
    results = tmp_path / "results"
    assert collect_cli(capsys, a_poll(tmp_path, "poll1", run_record(1, 0.9)), "--results", results)[0] == 0
    d = saved(results)
    d["per_seed"]["1"]["exact_match"] = 1.7
    (results / "gpu_scan_jump_simple.json").write_text(json.dumps(d))
    code, _, err = collect_cli(
        capsys, a_poll(tmp_path, "poll2", run_record(2, 0.5), started=2000.0), "--results", results
    )
    assert code == 2 and "gpu_scan_jump_simple.json: per_seed.1.exact_match 1.7 is not in [0, 1]" in err


def test_collect_gives_a_variant_a_file_of_its_own(tmp_path, capsys):
    variant = dict(run_record(1, 0.5), id="scan_jump_no_tf32-simple-s1", group="scan_jump_no_tf32", train_args=[])
    path = result_file(tmp_path / "poll", 1000.0, [run_record(1, 0.9), variant])
    args = type("A", (), dict(paths=[path], results=str(tmp_path / "r"), replace=False, dry_run=False))
    assert collect(args) == 0
    assert sorted(os.listdir(tmp_path / "r")) == ["gpu_scan_jump_no_tf32_simple.json", "gpu_scan_jump_simple.json"]
    d = json.loads((tmp_path / "r" / "gpu_scan_jump_no_tf32_simple.json").read_text())
    assert d["variant"] == "no_tf32" and d["mean"] == 0.5
    assert "variant" not in json.loads((tmp_path / "r" / "gpu_scan_jump_simple.json").read_text())
    assert "LSTM + Lex.: Simple (--arch lex_lstm) [no_tf32] |" in capsys.readouterr().out


def test_collect_merges_polls_and_keeps_out_time_limited_seeds(tmp_path, capsys):
    a = result_file(tmp_path / "poll1", 1000.0, [run_record(1, 0.9)])
    b = result_file(
        tmp_path / "poll2",
        1000.0,
        [
            run_record(1, 0.9),
            run_record(2, 0.7),
            run_record(3, 0.2, updates=5000),
            run_record(4, None, status="failed"),
        ],
    )
    results = tmp_path / "results"

    def args(*p, **kw):
        return type("A", (), dict(paths=list(p), results=str(results), replace=False, dry_run=False, **kw))

    assert collect(args(a, b)) == 0
    d = json.loads((results / "gpu_scan_jump_simple.json").read_text())
    assert d["seeds"] == [1, 2] and d["mean"] == pytest.approx(0.8) and d["std"] == pytest.approx(0.1)
    assert set(d["excluded"]) == {"3", "4"} and "5000 of 8000" in d["excluded"]["3"]
    assert d["paper"] == [0.92, 0.17] and d["per_seed"]["1"]["gpu_share_minutes"] == 2.0
    out = capsys.readouterr().out
    assert "| scan jump | LSTM + Lex.: Simple (--arch lex_lstm) | 0.92 ± 0.17 | 0.80 ± 0.10 (2 seeds) |" in out
    # a later campaign's seed 2 does not replace the one there without --replace
    c = result_file(tmp_path / "poll3", 2000.0, [run_record(2, 0.1), run_record(5, 0.5)])
    assert collect(args(c)) == 0
    d = json.loads((results / "gpu_scan_jump_simple.json").read_text())
    assert d["per_seed"]["2"]["exact_match"] == 0.7 and d["seeds"] == [1, 2, 5]
    assert "seeds 2 are there already: kept" in capsys.readouterr().out
    # seed 3 was time-limited: a later campaign's complete seed 3 takes its place, the earlier one kept aside
    e = result_file(tmp_path / "poll5", 2500.0, [run_record(3, 0.6)])
    assert collect(args(e)) == 0
    d = json.loads((results / "gpu_scan_jump_simple.json").read_text())
    assert d["seeds"] == [1, 2, 3, 5] and d["per_seed"]["3"]["exact_match"] == 0.6 and "3" not in d["excluded"]
    assert [(x["seed"], x["updates"]) for x in d["superseded"]] == [(3, 5000)]
    assert "seed 3 did not complete before" in capsys.readouterr().out
    with pytest.raises(CollectError, match="neither a results.json nor a folder"):
        collect(args(str(tmp_path / "nothing")))
    (results / "gpu_scan_jump_lstm.json").write_text('{"note": "by hand"}')  # a file collect did not write
    lstm = dict(run_record(1, 0.0), id="scan_jump-lstm-s1", model="lstm")
    with pytest.raises(CollectError, match="was not written by collect: not touched"):
        collect(args(result_file(tmp_path / "poll4", 3000.0, [lstm])))
    assert json.loads((results / "gpu_scan_jump_lstm.json").read_text()) == {"note": "by hand"}
