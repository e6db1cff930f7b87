"""The one pipeline behind examples/{colors,scan,cogs,eng_cmn}/run.sh (Akyurek & Andreas 2021, section 5), also
used by examples/custom, examples/cat_oci (its recipe: tasks/cat_oci) and examples/compositional_split.

    python -m fairseq_lexical_recipes TASK [options]     # TASK: colors, scan, cogs, eng_cmn

For each task: prepare the data (official layouts) -> learn the lexicons (tools/build_lexicon.py) ->
fairseq-preprocess -> for every seed and model: fairseq-train -> fairseq-generate -> tools/score.py --json ->
mean +/- std over seeds (lexical_offline.metrics.aggregate), printed as a table and written to WORK/summary.json.

Layout of WORK:
    config.json                      the recipe's settings (paper or CPU-small), models, seeds, data files
    data/                            train/valid/test .src/.tgt (whitespace-normalised), lexcorpus.src/.tgt
    bin/                             fairseq-preprocess output (+ prepared.json: what it was made from)
    lexicons/<method>.tsv            learned lexicons (+ .log, and .json: what it was made from)
    <model>/seed<N>/                 config.json, train.log, generate.txt, generate.log, score.json, run.json
    jobs/<model>_seed<N>.log         with --jobs N > 1: the output of that pair's own recipe process
    summary.json                     mean +/- std over the seeds of this invocation, per model and metric

A (model, seed) whose score.json exists is skipped (unless --force); its config.json must then match the current
settings, else the recipe stops (use --force or another --work). An unfinished run with matching settings resumes
from its checkpoint_last.pt (fairseq's own restore; runs without validation save one every RESUME_SAVE_EVERY
updates), appending to its train.log; one stopped before its first checkpoint starts again, its logs kept as
train.log.1, ...; one with other settings stops the recipe, as a finished one does, once it holds a checkpoint
(before that it starts again).

Modules: catalogue (the rows, lexicon methods), families (what a family of rows shares: archs per size, training,
evaluated checkpoint, replicas, CUDA graphs, --damage), settings (hyper-parameters), tasks/ (one per dataset, with the
papers' numbers; tasks/cat_oci: examples/cat_oci's recipe, one stage per training size), cli (command line), invocation
(the options checked in one place, into a frozen Invocation), recipe (the planner: every command, and each (model, seed)
run as an execute.RunSpec of a Plan), runner (runs a recipe's plan: preparation, checks before writing, lexicons,
--replicas, --jobs, the report; the stages of a recipe, run_stages, and the loop over a plan's runs, execute_runs),
execute (the one executor of a run's train, generate and score steps, also tasks/cat_oci's), rundir (a run's directory:
reuse, resume, refusal, what may be deleted; also tasks/cat_oci's), steps (a data-bin or lexicon made once and reused
while its inputs are unchanged; also cat_oci's and compositional_split's steps), lexicons (the runner's lexicon steps),
lla (Thrush 2020's training call and checkpoint selection), process (running programs), fairseq_log (reading
fairseq-train's logs), reports (tables, summary.json), console (messages, errors, exit statuses), textio (reading and
writing files), campaign/ (GPU campaigns, tools/gpu_campaign.sh). Importing them loads neither fairseq nor torch.
"""

import os

ROOT = os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))
)  # the repository (an editable install: tools/setup_env.sh)
