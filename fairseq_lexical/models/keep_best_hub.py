"""What the plugin's models do about the beam search where fairseq, not the task, decides (docs/search.md).

- ``from_pretrained`` gives a hub whose task is ``lexical_translation`` (the keep-best search) when the checkpoint
  was trained with fairseq's ``translation`` task, so ``hub.translate`` and the analysis tools built on the hub keep
  the best hypothesis; ``hub.generate(..., beam_search="fairseq")`` gives fairseq's search for one call. The task's
  generator is ``sequence_generator.build_search_generator``'s, as everywhere.
- ``prepare_for_inference_``, which fairseq-generate, fairseq-interactive and the hub call once per model, prints a
  one-line hint when a beam search runs with fairseq's ``translation`` task.
"""

import logging

from fairseq.tasks import TASK_REGISTRY
from fairseq.tasks.translation import TranslationTask

from lexical_offline.beam_searches import KEEP_BEST_TASK_NAME


logger = logging.getLogger(__name__)

_hinted = False


def hint_if_fairseq_search(cfg) -> bool:
    """Log the hint once per process when ``cfg`` (fairseq's whole configuration) decodes with a beam wider than 1
    under a task without the keep-best search; returns whether it did."""
    global _hinted
    generation, task = getattr(cfg, "generation", None), getattr(cfg, "task", None)
    if _hinted or generation is None or task is None or getattr(generation, "beam", 5) <= 1:
        return False
    if getattr(task, "_name", None) != "translation" or getattr(generation, "sampling", False):
        return False
    _hinted = True
    logger.warning(
        "fairseq's beam search (--task translation) ends a sentence once --beam hypotheses have ended and "
        "can return a worse one than greedy decoding with this model; --task %s keeps the best "
        "(docs/search.md)",
        KEEP_BEST_TASK_NAME,
    )
    return True


def missing_paths(model_dir: str, checkpoint_file: str, data: str) -> None:
    """FileNotFoundError naming what ``from_pretrained`` would not find (fairseq fails later with a TypeError
    naming no path): the model directory, each checkpoint of ``a.pt:b.pt``, the data directory (relative to the
    model directory when it starts with '.', as fairseq resolves it)."""
    import os

    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"from_pretrained: model directory {model_dir!r} does not exist")
    for name in checkpoint_file.split(":"):
        if not os.path.isfile(os.path.join(model_dir, name)):
            raise FileNotFoundError(f"from_pretrained: no checkpoint {name!r} in {model_dir!r}")
    data_dir = os.path.join(model_dir, data) if data.startswith(".") else data
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(
            f"from_pretrained: data directory {data_dir!r} (data_name_or_path) does not exist; "
            f"give the data-bin the model was trained on (its dictionaries)"
        )


class KeepBestHub:
    """Mixin (first base) of the plugin's model classes: the module docstring's two hooks."""

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        from fairseq import hub_utils

        if model_name_or_path not in cls.hub_models():  # fairseq resolves neither path's absence by name
            missing_paths(model_name_or_path, checkpoint_file, data_name_or_path)
        x = hub_utils.from_pretrained(
            model_name_or_path, checkpoint_file, data_name_or_path, archive_map=cls.hub_models(), **kwargs
        )
        task, cfg = x["task"], x["args"]
        if type(task) is TranslationTask:  # the plugin's task by its registered name: models import no task module
            task = TASK_REGISTRY[KEEP_BEST_TASK_NAME].from_translation_task(task)
            cfg.task = task.cfg
        return hub_utils.GeneratorHubInterface(cfg, task, x["models"])

    def prepare_for_inference_(self, cfg):
        super().prepare_for_inference_(cfg)
        hint_if_fairseq_search(cfg)
