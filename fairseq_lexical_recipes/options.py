"""One invocation of the recipes, typed (RecipeOptions): what `python -m fairseq_lexical_recipes TASK ...` parses, and
what the
programs that drive the pipeline themselves give it directly (examples/custom, examples/compositional_split, the
GPU campaign, examples/scan/width_proxy.py). The defaults here are the command line's (fairseq_lexical_recipes.cli
reads them);
``argv()`` spells the options back as the command line that parses to them (with the task's, Task.argv(): the
--jobs children, the campaign's device processes)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import List, Optional

from fairseq_lexical_recipes.process import PROGRESS_EVERY
from fairseq_lexical_recipes.settings import LlaSettings

# options whose command-line spelling is not --<field name>
_PRESET_FLAGS = {"cpu-small": "--cpu-small", "cpu-medium": "--cpu-medium"}
_FLAGS = ("force", "dry_run", "prepare_only", "as_job")


@dataclass(frozen=True)
class RecipeOptions:
    data: Optional[str] = None  # None: the task's default_data()
    work: Optional[str] = None  # None: the task's default_work()
    models: Optional[str] = None  # None: the task's default_models
    seeds: int = 1
    seed_list: Optional[str] = None
    replicas: str = "auto"  # a model's seeds trained as one process (--replica-seeds): auto, on, off
    force: bool = False
    dry_run: bool = False
    prepare_only: bool = False
    jobs: Optional[int] = None  # None: the task's default_jobs
    as_job: bool = False  # a --jobs child: the parent prepared WORK, writes config.json and the report
    progress_every: float = PROGRESS_EVERY
    keep_checkpoints: str = "used"
    preset: str = "paper"
    hidden: Optional[int] = None
    # overrides of the task's settings (None: the preset's)
    max_update: Optional[int] = None
    lr: Optional[float] = None
    warmup_updates: Optional[int] = None
    batch_size: Optional[int] = None
    update_freq: Optional[int] = None
    max_tokens: Optional[int] = None
    patience: Optional[int] = None
    beam: Optional[int] = None
    max_len_b: Optional[int] = None
    checkpoint: Optional[str] = None
    decoder: Optional[str] = None
    sentence_avg: Optional[bool] = None
    adam_betas: Optional[str] = None
    lexicon: Optional[str] = None
    lexicon_top_k: Optional[int] = None
    train_args: str = ""
    lla_max_epoch: int = LlaSettings.max_epoch
    lla_lexicon_epochs: int = LlaSettings.lexicon_epochs
    lla_batch_size: int = LlaSettings.batch_size
    lla_lexicon_batch_size: int = LlaSettings.lexicon_batch_size
    lla_lr: float = LlaSettings.lr
    lla_checkpoint: str = LlaSettings.checkpoint
    damage: Optional[str] = None
    generate_args: str = ""
    decode_jobs: int = 1

    @classmethod
    def from_namespace(cls, args) -> "RecipeOptions":
        """The options of a parsed command line (the task's own are the task's: Task.own_options)."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})

    def argv(self) -> List[str]:
        """The command line (after TASK) that parses to these options: each one that differs from its default."""
        out: List[str] = []
        default = RecipeOptions()
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            if value == getattr(default, name):
                continue
            if name == "preset":
                out.append(_PRESET_FLAGS[value])
            elif name == "sentence_avg":
                out.append("--sentence-avg" if value else "--token-avg")
            elif name in _FLAGS:
                out.append("--" + name.replace("_", "-"))
            elif name in ("damage",) and value == "auto":
                out.append("--damage")
            else:  # --opt=VALUE: a value that starts with "-" is not taken for an option
                out.append(f"--{name.replace('_', '-')}={value}")
        return out

    def but(self, **changes) -> "RecipeOptions":
        return replace(self, **changes)
