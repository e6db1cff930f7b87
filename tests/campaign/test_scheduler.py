"""fairseq_lexical_recipes.campaign.scheduler: which run a free slot takes, what the probe stops, what a run left."""

import pytest

from fairseq_lexical_recipes.campaign import plan, scheduler, state


def test_a_slot_waits_for_the_group_of_the_next_run_rather_than_take_a_later_one():
    """The jump data ready first must not give every slot to jump runs while around right's, earlier in the plan,
    is still being prepared."""
    sched = scheduler.Scheduler.__new__(scheduler.Scheduler)
    sched.runs = [plan.RunRecord(r) for r in plan.plan_runs("scan")]
    sched.prep = {g.name: state.Preparation() for g in plan.plan_groups("scan")}
    sched.prep["scan_jump"].status = state.PrepStatus.READY
    sched.prep["scan_around_right"].status = state.PrepStatus.PREPARING
    assert [r.id for r in sched.ready_queued()] == ["scan_jump-simple-s1"]
    sched.prep["scan_around_right"].status = state.PrepStatus.FAILED  # its runs fail; the others go on
    ready = [r.id for r in sched.ready_queued()]
    assert ready[:3] == ["scan_jump-simple-s1", "scan_jump-simple-s2", "scan_jump-simple-s3"]
    assert "scan_around_right-simple-s1" not in ready


def test_the_probe_stops_running_runs_that_cannot_finish(monkeypatch):
    """The lease of 2026-11-26: 12 SCAN runs at 11 updates/s could not finish their 8,000 updates in the 10 min
    left, while 9 English-Chinese runs could: the SCAN runs give their slots up (before, they ran on to their
    time caps and came back unfinished, and nothing else ran)."""
    groups = ["scan"] * 3 + ["eng_cmn"] * 3
    sched = scheduler.Scheduler.__new__(scheduler.Scheduler)
    sched.runs = [plan.RunRecord(plan.Run(f"r{k}", g, g, None, "lstm", 1, (), k)) for k, g in enumerate(groups)]
    for r in sched.runs[:3]:
        r.status, r.updates = plan.RunStatus.RUNNING, 300
    sched.procs, sched.measured, sched.state, sched.batches = {}, {"r1": 13.0}, "unused", {}
    costs = plan.Costs(
        {"scan": 8000, "eng_cmn": 3000}, {"scan": 11.0, "eng_cmn": 11.0}, {"scan": 37.0, "eng_cmn": 30.0}, 18.0
    )
    monkeypatch.setattr(sched, "costs", lambda: costs, raising=False)
    monkeypatch.setattr(scheduler, "read_deadline", lambda state: 1000.0 + 600.0)
    monkeypatch.setattr(scheduler, "log", lambda *parts: None)
    monkeypatch.setattr(scheduler, "tail", lambda path: "")
    asked = []  # stopped by request, never by a signal: under MPS a killed run can take the others down
    monkeypatch.setattr(scheduler, "stop_runs", lambda state, runs, reason, grace, kill: asked.append(kill) or [])
    monkeypatch.setattr(scheduler, "stop_groups", lambda *a, **k: pytest.fail("a run was signalled"))
    sched.decide(sched.runs[:3], {"r0": 11.0, "r1": 11.0, "r2": 11.0}, now=1000.0)
    status = {r.id: r.status for r in sched.runs}
    assert status == {"r0": "stopped", "r1": "stopped", "r2": "stopped", "r3": "queued", "r4": "queued", "r5": "queued"}
    assert asked == [False, False, False]
    assert sched.runs[0].reason.startswith("cannot finish by the deadline: needs about 12.")
    assert sched.slots == 3 and sched.measured["finished_by_concurrency"][3] == 3
    assert sched.phase is scheduler.Phase.STEADY

    # where nothing can finish, the running runs go on (a time-limited run still says how far it got)
    for r in sched.runs[:3]:
        r.status, r.updates = plan.RunStatus.RUNNING, 300
    sched.runs = sched.runs[:3]
    sched.decide(sched.runs, {"r0": 11.0, "r1": 11.0, "r2": 11.0}, now=1000.0)
    assert [r.status for r in sched.runs] == ["running"] * 3


@pytest.mark.slow
def test_run_summary_reads_validation_and_the_first_wrong_outputs(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        '2026-11-26 07:40:01 | INFO | fairseq_cli.train | begin validation on "valid" subset\n'
        '2026-11-26 07:40:02 | INFO | valid | {"epoch": 3, "valid_loss": "0.9", "valid_exact_match": "0.25", '
        '"valid_num_updates": "500"}\n'
        '2026-11-26 07:41:02 | INFO | valid | {"epoch": 6, "valid_loss": "0.4", "valid_exact_match": "0.75", '
        '"valid_num_updates": "1000"}\n'
        '2026-11-26 07:42:02 | INFO | valid | {"epoch": 9, "valid_loss": "0.5", "valid_num_updates": "1500"}\n'
        '2026-11-26 07:42:03 | INFO | valid | {"epoch": 9, "valid_loss": "0.5", "valid_num_u'  # cut short
    )
    (tmp_path / "generate.txt").write_text(
        "S-1\tjump twice\nT-1\tJUMP JUMP\nH-1\t-0.1\tJUMP JUMP\nD-1\t-0.1\tJUMP JUMP\n"
        "S-0\twalk\nT-0\tWALK\nH-0\t-2.5\tRUN\n"
        "S-2\tlook\nT-2\tLOOK\nH-2\t-9.0\t\n"
        "Generate test with beam=1: BLEU4 = 0.00\n"
    )
    s = scheduler.run_summary(str(tmp_path))
    assert s["validation"]["last"] == {"updates": 1500, "loss": 0.5, "exact_match": None}
    assert s["validation"]["best_loss"] == {"updates": 1000, "loss": 0.4, "exact_match": 0.75}
    assert [p["updates"] for p in s["validation"]["points"]] == [500, 1000, 1500]
    assert s["errors"] == {
        "hypotheses": 3,
        "wrong": 2,
        "empty": 1,
        "first": [
            {"id": 0, "source": "walk", "reference": "WALK", "hypothesis": "RUN"},
            {"id": 2, "source": "look", "reference": "LOOK", "hypothesis": ""},
        ],
    }
    r = plan.RunRecord(plan.plan_runs("mini")[0], score={"exact_match": 0.5}, validation=s["validation"])
    assert state.score_text(r) == "exact_match 0.5000 (validation loss 0.5)"
    r.validation = {"last": {"loss": 0.4, "exact_match": 0.75}}
    assert state.score_text(r) == "exact_match 0.5000 (validation loss 0.4, exact match 0.750)"
