"""fairseq_lexical_recipes.campaign.plan: the plans' order, what a lease completes at the rates measured, the
simulated schedule and the concurrency chosen from it, each run's recipe command and options."""

import pytest

from fairseq_lexical_recipes.campaign import graphs, plan


def test_paper_plan_order_is_the_issues():
    ids = [r.id for r in plan.plan_runs("paper")]
    assert ids[:4] == [
        "scan_jump-lstm-s1",
        "scan_jump-simple-s1",
        "scan_around_right-lstm-s1",
        "scan_around_right-simple-s1",
    ]
    first_cogs, first_cmn = ids.index("cogs-lstm-s1"), ids.index("eng_cmn-lstm-s1")
    assert all(i.startswith("scan_") for i in ids[:first_cogs]) and len(ids[:first_cogs]) == 12  # 3 seeds x 4
    assert {i.split("-")[1] for i in ids[first_cogs:first_cmn]} == {"lstm", "copy", "simple"}
    assert {i.split("-")[1] for i in ids[first_cmn : first_cmn + 9]} == {"lstm", "simple", "ibm1"}
    assert len(set(ids)) == len(ids)


def test_width_plan_runs_the_fixed_rows_first_then_one_seed_of_each_variant():
    runs = plan.plan_runs("width")
    ids = [r.id for r in runs]
    assert ids[:2] == ["scan_jump-simple-s1", "scan_around_right-simple-s1"]  # the recipes' defaults: paper rows
    variants = {r.group: r.train_args for r in runs[2:5]}
    assert variants == {
        "scan_jump_fairseq_init": ("--tf32", "--weight-init", "fairseq"),
        "scan_jump_authors_loop": ("--tf32", *plan.AUTHORS_LOOP),
        "scan_jump_no_tf32": (),
    }
    assert [r.seed for r in runs[5:]] == [2, 2, 3, 3] and len(set(ids)) == len(ids)
    for r in runs[:5]:  # each variant's options reach fairseq-train through the recipe's --train-args
        _, options = parsed(plan.run_command(r, "/data", "/work"))
        assert options.train_args == " ".join(r.train_args) and (options.batch_size, options.update_freq) == (512, 1)


def test_scan_plan_runs_the_simple_rows_first_then_the_baseline_then_the_loops():
    runs = plan.plan_runs("scan")
    ids = [r.id for r in runs]
    simple = [f"scan_{split}-simple-s{seed}" for seed in range(1, 6) for split in ("jump", "around_right")]
    assert ids[:10] == simple  # seed by seed, both splits: whatever number run at once, both splits get seeds
    assert {r.id.split("-s")[0] for r in runs[10:20]} == {"scan_jump-lstm", "scan_around_right-lstm"}
    loops = {r.group: r.train_args for r in runs[20:]}
    assert loops == {
        "scan_jump_authors_loop": ("--tf32", *plan.AUTHORS_LOOP),
        "scan_jump_authors_dropout": ("--tf32", "--dropout-placement", "authors"),
        "scan_jump_random_batches": ("--tf32", "--task", "lexical_translation", "--batch-order", "random"),
    }
    assert len(ids) == 29 and len(set(ids)) == len(ids)
    # the plain LSTM shares its split's prepared data with LSTM + Simple: one preparation per split
    assert [g.name for g in plan.plan_groups("scan")][:2] == ["scan_jump", "scan_around_right"]
    for r in (runs[0], runs[10], runs[-1]):
        _, options = parsed(plan.run_command(r, "/data", "/work"))
        assert options.train_args == " ".join(r.train_args) and (options.batch_size, options.update_freq) == (512, 1)


def test_a_fresh_lease_completes_the_scan_plans_first_ten_runs_at_the_rates_measured():
    """Issue 79, point 5: at the rates of 2026-11-28 (SCAN_RUN_RATES) and the lease's measured overheads, a fresh
    900 s lease completes at least 8 SCAN paper runs of 8,000 updates with the scan plan; that lease completed its
    ten (training; seven then failed at decoding, since fixed). Each plan's table is docs/gpu.md's."""
    table = plan.lease_estimate("scan", 900.0)
    best = plan.best_concurrency("scan", 900.0)
    assert best == 10 and len(table[best]) == 10 >= 8
    assert table[best] == [r.id for r in plan.plan_runs("scan")[:10]]  # LSTM + Simple, seeds 1-5, both splits
    assert all(plan.max_update_of(r) == 8000 for r in plan.plan_runs("scan")[:10])
    # a run of 8,000 updates at 11.7 updates/s (jump, ten at once) with its start-up and decoding takes 749 s of the
    # 780 the lease leaves: an eleventh cannot follow, and a shorter lease completes none
    assert len(table[10]) == 10 and plan.lease_estimate("scan", 600.0)[10] == []
    # the authors' loop (random batches, 8.0 updates/s) never fits a lease; the width plan's other eight do
    width = plan.lease_estimate("width", 900.0)
    assert len(width[9]) == 8 and "scan_jump_authors_loop-simple-s1" not in width[9]
    assert plan.lease_estimate("mini", 900.0) == {} and plan.best_concurrency("mini", 900.0) is None
    assert plan.measured_rate(plan.SCAN_SIMPLE[0], 11) is None  # beyond what was measured: no guess
    assert plan.measured_rate(plan.SCAN_SIMPLE[0], 5) == pytest.approx(13.94 + (12.65 - 13.94) * 4 / 8)


def _runs(groups):
    return [plan.Run(f"r{k}", g, "scan", None, "lstm", 1, (), k) for k, g in enumerate(groups)]


def test_simulate_by_hand():
    # run cost = 10 start-up + 100 updates / 1 per s + 20 decoding = 130 s; group b: 10 + 50 / 1 + 20 = 80 s
    costs = plan.Costs({"a": 100, "b": 50}, {"a": 1.0, "b": 1.0}, {"a": 20.0, "b": 20.0}, startup_s=10.0)
    runs = _runs(["a", "a", "a", "b"])
    one = plan.simulate(runs, costs, 1, 300.0)
    assert one.finished == ["r0", "r1"] and one.ends == {"r0": 130.0, "r1": 260.0}  # r2 ends at 390, r3 at 340
    two = plan.simulate(runs, costs, 2, 300.0)
    assert two.finished == ["r0", "r1", "r2", "r3"] and two.ends["r3"] == 210.0  # r2 at 260, r3 on the other slot
    # a slot busy for 250 s more: only the other one takes runs (130, 260), then nothing fits
    assert plan.simulate(runs, costs, 2, 300.0, busy_until=[250.0]).finished == ["r0", "r1"]
    # half the rate: 10 + 200 + 20 = 230 s a run
    assert plan.simulate(runs, costs, 2, 300.0, rate_scale=0.5).ends["r0"] == 230.0


def test_a_running_run_costs_what_it_has_left():
    costs = plan.Costs({"a": 100, "b": 50}, {"a": 1.0, "b": 1.0}, {"a": 20.0, "b": 20.0}, startup_s=10.0)
    runs = _runs(["a", "a", "b"])
    # r0 has made 60 of its 100 updates: 40 + 20 s left on its slot; r1, waiting for a slot, starts from nothing
    one = plan.simulate(runs, costs, 1, 300.0, done_updates={"r0": 60, "r1": 90})
    assert one.ends == {"r0": 60.0, "r1": 190.0, "r2": 270.0}
    assert plan.simulate(runs, costs, 2, 300.0, rate_scale=0.5, done_updates={"r0": 60}).ends["r0"] == 100.0


def test_concurrency_follows_the_measured_rates():
    costs = plan.Costs({"a": 100}, {"a": 1.0}, {"a": 0.0}, startup_s=0.0)
    runs = _runs(["a"] * 8)
    # alone 4 updates/s (25 s a run); among 4, 1 each (100 s); between, rate_at interpolates: 3 among 2 (33.3 s),
    # 2 among 3 (50 s). In 101 s: 1 slot does 4 runs, 2 slots 6, 3 slots 6, 4 slots 4
    k, table = plan.choose_concurrency(runs, costs, r1=4.0, rk=1.0, big_k=4, time_left=101.0)
    assert plan.rate_at(2, 4.0, 1.0, 4) == 3.0 and plan.rate_at(3, 4.0, 1.0, 4) == 2.0
    assert table == {1: 4, 2: 6, 3: 6, 4: 4} and k == 3  # a tie goes to more at once
    # concurrency that costs nothing: the most at once wins
    k, table = plan.choose_concurrency(runs, costs, r1=1.0, rk=1.0, big_k=4, time_left=100.0)
    assert k == 4 and table == {1: 1, 2: 2, 3: 3, 4: 4}


def parsed(command):
    """(task, RecipeOptions) of a `python -m fairseq_lexical_recipes TASK ...` command, as the recipe process parses
    it."""
    from fairseq_lexical_recipes.cli import parse

    assert command[1:3] == ["-m", "fairseq_lexical_recipes"]
    return parse(command[3:])


def test_recipe_commands_parse():
    for r in plan.plan_runs("paper")[:1] + plan.plan_runs("mini"):
        task, options = parsed(plan.run_command(r, "/data", "/work", ["--stop-time-hours", "0.1"]))
        assert options.as_job and options.models == r.model and options.seed_list == str(r.seed)
        assert options.train_args == " ".join([*r.train_args, "--stop-time-hours", "0.1"])
        assert task.split == r.split and options == plan.run_options(r, "/data", "/work", ["--stop-time-hours", "0.1"])
    # on the GPU: the paper's 512 sentences in one pass, TF32 products
    first = plan.plan_runs("paper")[0]
    _, options = parsed(plan.run_command(first, "/data", "/work"))
    assert (options.batch_size, options.update_freq, options.train_args) == (512, 1, "--tf32")
    group = plan.plan_groups("paper")[2]
    _, options = parsed(plan.prepare_command(group, "/data", "/work"))
    assert options.prepare_only and options.models == "lstm,copy,simple"


def test_lstm_runs_train_with_cuda_graphs_only_where_the_devices_check_passed():
    """plan.cuda_graph_args: --cuda-graphs for the LSTM rows (lex_lstm's classes) where start's check of the graphs
    passed; never for the Transformer or LLA rows, nor where the check failed, fell back or did not run."""
    from dataclasses import replace

    first = plan.plan_runs("paper")[0]
    passed = {"passed": True, "speedup": 3.1}
    for model in ("lstm", "simple", "copy", "ibm1", "uniform"):
        assert plan.cuda_graph_args(replace(first, model=model), passed) == ("--cuda-graphs",)
    for model in ("transformer", "pgn", "rdangle_shr", "lla"):
        assert plan.cuda_graph_args(replace(first, model=model), passed) == ()
    for check in (None, {"passed": False, "fallback": "the model is on cpu"}, {"passed": False, "error": "exit 1"}):
        assert plan.cuda_graph_args(first, check) == ()
    _, options = parsed(plan.run_command(first, "/data", "/work", plan.cuda_graph_args(first, passed)))
    assert options.train_args == "--tf32 --cuda-graphs"
    assert graphs.graphs_text(passed) == "CUDA graphs passed their check (3.1x alone): the LSTM runs use them"
    # faster alone, slower at the scheduler's concurrency (the H200 of 2026-11-28): eager
    at_nine = {"runs": 9, "eager_in_all": 115.1, "graphs_in_all": 99.4, "faster": "eager"}
    slower = {"passed": False, "fallback": None, "speedup": 1.39, "concurrency": at_nine}
    assert graphs.graphs_text(slower) == (
        "CUDA graphs not used: 9 at once, 99.4 updates/s in all with graphs against 115.1 eager (alone 1.39x)"
    )
    assert plan.cuda_graph_args(first, slower) == ()
    faster = dict(slower, passed=True, concurrency=dict(at_nine, graphs_in_all=130.0, faster="graphs"))
    assert graphs.graphs_text(faster).startswith("CUDA graphs passed their check (1.39x alone, 130.0 updates/s in all")
    assert graphs.graphs_text(None).startswith("CUDA graphs not checked (--no-cuda-graphs, the default)")
    failed = {"passed": False, "fallback": None, "speedup": 0.9, "largest_relative_difference": 0.02}
    assert graphs.graphs_text(failed) == "CUDA graphs not used: speed-up 0.9x, largest relative loss difference 0.02"
    assert graphs.graphs_text({"passed": False, "error": "exit 1: Traceback\nRuntimeError: boom\n"}).endswith("boom")


def test_max_update_is_the_rows_own():
    """The campaign's training length of a run is the recipe's for that row: the LSTM rows' HParams, the
    Transformer rows' TransformerSettings (not the LSTM rows'), none for the lla rows (trained in epochs)."""
    run = plan.plan_runs("mini")[0]
    assert plan.max_update_of(run) == 30
    from dataclasses import replace

    paper = replace(run, options=())
    assert plan.max_update_of(paper) == 8000
    assert plan.max_update_of(replace(paper, model="transformer")) == 30000
    assert plan.max_update_of(replace(paper, model="lla")) is None


def test_replica_batches_take_a_groups_queued_seeds_in_one_process():
    runs = plan.plan_runs("scan")
    first = runs[0]  # scan_jump-simple-s1
    batch = plan.replica_batch(first, runs, replicas=True)
    assert [r.id for r in batch] == [f"scan_jump-simple-s{s}" for s in (1, 2, 3, 4, 5)]  # seeds 4-5 from tier 2
    assert plan.replica_batch(first, runs, replicas=False) == [first]
    options = plan.run_options(first, "DATA", "WORK", seeds=[r.seed for r in batch])
    assert options.seed_list == "1,2,3,4,5" and options.replicas == "on"
    assert plan.run_options(first, "DATA", "WORK").replicas == "off"
    assert all(g.replicas for name in ("paper", "scan", "width") for g in plan.plan_groups(name))
