"""The lexicons of an invocation of the recipes (tools/build_lexicon.py on WORK/data's lexicon corpus, one per
method the models read, or the user's --lexicon file), built once and reused while the data and command are the
same. Mixed into runner.Recipe."""

from __future__ import annotations

import os
from typing import List, Optional

from lexical_offline.textio import write_parallel

from fairseq_lexical_recipes import commands, ownership
from fairseq_lexical_recipes.catalogue import LEXICON_METHODS, MODELS
from fairseq_lexical_recipes.console import hms, say, show
from fairseq_lexical_recipes.invocation import given_lexicon
from fairseq_lexical_recipes.process import run_logged
from fairseq_lexical_recipes.rundir import RunDirectory
from fairseq_lexical_recipes.steps import Step
from fairseq_lexical_recipes.tasks import Prepared
from fairseq_lexical_recipes.textio import count_entries, sha1_lexicon_entries


class LexiconSteps:
    """Recipe methods of the lexicons (self: a runner.Recipe)."""

    def lexicon_path(self, method: str) -> str:
        if self.given_lexicon(method):
            return os.path.abspath(self.options.lexicon)
        return f"{self.layout.lexicons}/{method}.tsv"

    def lexicon_command(self, method: str, data_dir: str = "", lexdir: str = "") -> List[str]:
        """build_lexicon.py for ``method`` from WORK/data's lexicon corpus into WORK/lexicons (or the given folders:
        check_before_writing builds one aside)."""
        data_dir, lexdir = data_dir or self.layout.data, lexdir or self.layout.lexicons
        options = [*LEXICON_METHODS[method][0], *self.task.lexicon_build_args]
        return commands.build_lexicon(
            options, data_dir + "/lexcorpus.src", data_dir + "/lexcorpus.tgt", f"{lexdir}/{method}.tsv"
        )

    def lexicon_step(self, method: str) -> Step:
        cmd = self.lexicon_command(method)
        key = {"data_sha1": self.data_sha1, "command": commands.stamp_command(cmd[1:], self.work)}
        log = f"{self.layout.lexicons}/{method}.log"
        old = {"command": show(cmd[1:])}  # recorded before stamps were portable
        return Step(
            f"build_lexicon.py --method {method}", f"{self.layout.lexicons}/{method}.json", key, [cmd[-2]], log, old
        )

    def lexicon_to_be_built(self, method: str, prep: Prepared) -> Optional[str]:
        """The SHA-1 (sha1_lexicon_entries) of the lexicon this invocation would build, where it would replace the
        one that finished or checkpointed runs were made with (built aside, in a temporary folder), else None."""
        import tempfile

        if self.options.force or self.given_lexicon(method) or self.lexicon_step(method).up_to_date():
            return None
        if not any(
            MODELS[m].lexicon == method and RunDirectory(self.run_dir(m, s), {}, "", "").has_results()
            for m, s in self.pairs
        ):
            return None
        with tempfile.TemporaryDirectory(prefix="lexicon-check-") as tmp:
            write_parallel(f"{tmp}/lexcorpus", prep.lexcorpus)
            cmd = self.lexicon_command(method, tmp, tmp)
            run_logged(cmd, f"{tmp}/{method}.log", what=f"build_lexicon.py --method {method}")
            return sha1_lexicon_entries(cmd[-2])

    def lexicon_methods(self) -> List[str]:
        """The lexicon methods the models read, each once, in the models' order."""
        return list(dict.fromkeys(MODELS[m].lexicon for m in self.models if MODELS[m].lexicon in LEXICON_METHODS))

    def given_lexicon(self, method: str) -> bool:
        """Whether the method's lexicon is the user's file (--lexicon replaces the Simple rows' lexicon)."""
        return given_lexicon(method, self.options)

    def build_lexicons(self) -> None:
        for method in self.lexicon_methods():
            path = self.lexicon_path(method)
            desc = LEXICON_METHODS[method][1]
            if self.given_lexicon(method):
                say(f"== lexicon (given with --lexicon): {count_entries(path)} entries in {path}")
                continue
            step, cmd = self.lexicon_step(method), self.lexicon_command(method)
            # a --jobs child's --force re-runs its pair only: the parent has rebuilt the lexicons its siblings use
            force = self.options.force and not self.options.as_job
            secs = None
            if force or not step.up_to_date():
                with ownership.writing(self.layout.lexicons):
                    secs = step.run(lambda: run_logged(cmd, step.log, what=step.name), force)
            done = "up to date" if secs is None else hms(secs)
            say(f"== lexicon ({desc}): {count_entries(path)} entries in {path} ({done})")
        self.lexicon_sha1_aside = {}  # built now: the fingerprints read the files
