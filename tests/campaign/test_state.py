"""fairseq_lexical_recipes.campaign.state: what a stop does to a run's record, whoever records it (the scheduler's
stop_all, or poll's processes.stop_everything where the scheduler no longer answers)."""

import pathlib

from fairseq_lexical_recipes.campaign import plan, state
from fairseq_lexical_recipes.campaign.plan import RunRecord, RunStatus


def records():
    runs = plan.plan_runs("mini")
    return [RunRecord(r, status=s) for r, s in zip(runs, (RunStatus.RUNNING, RunStatus.QUEUED, RunStatus.FINISHED))]


def test_a_stop_stops_what_runs_skips_what_waits_and_keeps_what_ended():
    running, queued, finished = records()
    running.eta_s, finished.reason = 120, None
    changed = [state.stop(r, "the lease's deadline", log_tail="the log's end") for r in (running, queued, finished)]
    assert changed == [True, True, False]
    assert (running.status, running.reason, running.log_tail, running.eta_s) == (
        RunStatus.STOPPED,
        "stopped by the lease's deadline",
        "the log's end",
        None,
    )
    assert running.reason == state.stop_request("the lease's deadline")  # what its stop file asked
    assert (queued.status, queued.reason, queued.log_tail) == (
        RunStatus.SKIPPED,
        "not started before the lease's deadline",
        None,
    )
    assert finished.status is RunStatus.FINISHED and finished.reason is None


def test_a_run_that_left_on_request_is_stopped_with_the_requests_reason():
    running = records()[0]
    state.stopped(running, "stopped on request (poll --stop)", "tail", ended=1000.0)
    assert (running.status, running.reason, running.ended) == (
        RunStatus.STOPPED,
        "stopped on request (poll --stop)",
        1000.0,
    )


def test_poll_stopping_a_replica_batch_gives_every_seed_the_batch_log(tmp_path):
    """processes.stop_everything, where the scheduler no longer answers: the runs of a replica batch share one
    process (its group) and its first run's log, and each stopped record ends with that log, not a missing one."""
    import subprocess
    import sys

    from fairseq_lexical_recipes.campaign import processes

    runs = [RunRecord(r, status=RunStatus.RUNNING) for r in plan.plan_runs("mini")[:2]]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])  # a process group that has ended
    gone.wait()
    for r in runs:
        r.pgid = gone.pid
    (tmp_path / "logs").mkdir()
    pathlib.Path(state.run_log(str(tmp_path), runs[0].id)).write_text("update 10\nthe batch's last line\n")
    state.write_runs(str(tmp_path), runs)
    (tmp_path / "campaign.json").write_text('{"mps": null}')  # no MPS daemon to quit
    processes.stop_everything(str(tmp_path), "the poll after the deadline")
    for r in state.read_runs(str(tmp_path)):
        assert r.status is RunStatus.STOPPED and "the batch's last line" in r.log_tail, r.log_tail
