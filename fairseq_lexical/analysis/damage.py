"""Artificial aphasia (Thrush 2020, Table 2): re-initialise named module groups of a trained model, decode, score.

"Damage to neural modules is done by randomly initializing their weights, causing the loss of all learned
information." A group's parameters are replaced by those of a freshly built model of the same configuration under
``seed``: the very initialisation that training started from, redrawn. Nothing outside the group is touched; the
report lists every parameter that was re-initialised and every parameter whose values changed.

Groups come from the model's ``module_groups()`` (``lla_lstm``: lstm, lexicon, adversary, embeddings, attention,
output, encoder, decoder); any submodule path of ``named_modules()`` (e.g. ``decoder.fc_out``) is a group too, so
every fairseq model can be damaged.

Needs fairseq and torch (imported on use, like ``analysis.gates``).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from lexical_offline.beam_searches import DEFAULT_BEAM_SEARCH

from .checkpoints import load_checkpoints, load_subset, model_device
from .gates import beam_decode

NO_DAMAGE = "none"


class DamageError(Exception):
    """A user-facing problem: missing files, unknown group, a group that the model does not have."""


@dataclass
class DamageReport:
    """What one damage condition did to the parameters."""

    groups: List[str]
    modules: List[str]  # the submodule paths the groups stand for
    seed: int
    reinitialised: List[str] = field(default_factory=list)  # parameter names in the groups
    changed: List[str] = field(default_factory=list)  # parameter names whose values differ afterwards
    max_abs_change: Dict[str, float] = field(default_factory=dict)

    @property
    def unchanged_in_groups(self) -> List[str]:
        """Re-initialised parameters that happen to hold the same values (e.g. zero-initialised and never trained)."""
        changed = set(self.changed)
        return [n for n in self.reinitialised if n not in changed]

    @property
    def changed_outside_groups(self) -> List[str]:
        inside = set(self.reinitialised)
        return [n for n in self.changed if n not in inside]

    def to_dict(self) -> dict:
        return {
            "groups": list(self.groups),
            "modules": list(self.modules),
            "seed": self.seed,
            "reinitialised": list(self.reinitialised),
            "changed": list(self.changed),
            "unchanged_in_groups": self.unchanged_in_groups,
            "changed_outside_groups": self.changed_outside_groups,
            "max_abs_change": dict(self.max_abs_change),
        }


# -- loading ---------------------------------------------------------------------------------------------------


def load_checkpoint(
    checkpoint: str,
    data: str,
    source_lang: Optional[str] = None,
    target_lang: Optional[str] = None,
    device: str = "cpu",
):
    """(model in eval mode, model config (argparse.Namespace or DictConfig), task) from a fairseq checkpoint and the
    data-bin directory (dictionaries, test data)."""
    if ":" in checkpoint and not os.path.exists(checkpoint):
        raise DamageError(f"{checkpoint}: give one checkpoint (ensembles are not damaged)")
    models, cfg, task = load_checkpoints([checkpoint], data, DamageError, source_lang, target_lang, device)
    return models[0], cfg.model, task


# -- groups ----------------------------------------------------------------------------------------------------


def available_groups(model) -> Dict[str, List[str]]:
    """{group name: submodule paths} declared by the model (``module_groups()``), empty for other models."""
    groups = getattr(model, "module_groups", None)
    return dict(groups()) if callable(groups) else {}


def resolve_modules(model, groups: Sequence[str]) -> List[str]:
    """The submodule paths that ``groups`` (group names or module paths) stand for, in order, without repeats."""
    declared = available_groups(model)
    modules = dict(model.named_modules())
    paths: List[str] = []
    for name in groups:
        if name in declared:
            found = declared[name]
        elif name in modules and name != "":
            found = [name]
        else:
            have = ", ".join(sorted(declared)) or "(none declared)"
            raise DamageError(
                f"unknown module group {name!r}: this model ({type(model).__name__}) has the groups {have}, "
                "or give a submodule path such as " + ", ".join(repr(n) for n, _ in list(model.named_children())[:3])
            )
        for path in found:
            if path not in paths:
                paths.append(path)
    return paths


def parameter_names(model, module_paths: Sequence[str]) -> List[str]:
    """Names (``named_parameters``) of every parameter inside the given submodules."""
    names = []
    for name, _ in model.named_parameters():
        if any(name.startswith(path + ".") for path in module_paths):
            names.append(name)
    return names


def parse_conditions(text: str) -> List[Tuple[str, ...]]:
    """``"none,lstm,lexicon,lstm+lexicon"`` -> [(), ("lstm",), ("lexicon",), ("lstm", "lexicon")]."""
    conditions = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        groups = tuple(g.strip() for g in item.split("+") if g.strip())
        conditions.append(() if groups in ((), (NO_DAMAGE,)) else groups)
    if not conditions:
        raise DamageError("no damage condition given")
    return conditions


def condition_name(groups: Sequence[str]) -> str:
    return "+".join(groups) if groups else NO_DAMAGE


# -- damage ----------------------------------------------------------------------------------------------------


def damage(model, task, model_cfg, groups: Sequence[str], seed: int) -> DamageReport:
    """Re-initialise ``groups`` of ``model`` in place with the initialisation of a fresh model built from
    ``model_cfg`` under ``torch.manual_seed(seed)``; return what changed."""
    import torch

    modules = resolve_modules(model, groups) if groups else []
    names = parameter_names(model, modules)
    if groups and not names:
        raise DamageError(f"the groups {', '.join(groups)} hold no parameters")
    report = DamageReport(groups=list(groups), modules=modules, seed=seed, reinitialised=names)
    if not names:
        return report
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rng_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        fresh = task.build_model(copy.deepcopy(model_cfg))
    finally:
        torch.random.set_rng_state(rng_state)
    fresh_params = dict(fresh.named_parameters())
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in names:
            if fresh_params[n].shape != params[n].shape:
                raise DamageError(
                    f"{n}: the rebuilt model's shape {tuple(fresh_params[n].shape)} differs from the "
                    f"checkpoint's {tuple(params[n].shape)}"
                )
            params[n].copy_(fresh_params[n].to(params[n]))
    for n, p in model.named_parameters():
        if not torch.equal(p.detach(), before[n]):
            report.changed.append(n)
            report.max_abs_change[n] = float((p.detach() - before[n]).abs().max())
    return report


# -- decoding and scoring --------------------------------------------------------------------------------------


def generate(
    model,
    task,
    subset: str,
    beam: int = 5,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    batch_size: int = 32,
    search: str = DEFAULT_BEAM_SEARCH,
) -> Tuple[List[str], List[str], List[str]]:
    """(hypotheses, references, sources) of every sentence of ``subset``, in sample id order, by a beam search
    (the best hypothesis; ``search``: 'keep-best' or 'fairseq', docs/search.md). References are printed as
    fairseq-generate prints T lines (unknown words as <<unk>>, so that an <unk> hypothesis never matches)."""
    import torch
    from fairseq import utils

    from ..sequence_generator import build_search_generator

    dataset = load_subset(task, subset, DamageError)
    itr = task.get_batch_iterator(
        dataset=dataset,
        max_sentences=batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        ignore_invalid_inputs=False,
        seed=1,
    ).next_epoch_itr(shuffle=False)
    options = {"beam": beam, "beam_search": search, "max_len_a": max_len_a, "max_len_b": max_len_b}
    generator = build_search_generator([model], task.target_dictionary, options)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    device = model_device(model)
    out: Dict[int, Tuple[str, str, str]] = {}
    with torch.no_grad():
        for sample in itr:
            sample = utils.move_to_cuda(sample, device=device) if device.type == "cuda" else sample
            hypos = generator.forward(sample)
            for i, sample_id in enumerate(sample["id"].tolist()):
                hyp = tgt_dict.string(hypos[i][0]["tokens"].int().cpu())
                ref = tgt_dict.string(utils.strip_pad(sample["target"][i], tgt_dict.pad()).int().cpu(), escape_unk=True)
                src = src_dict.string(utils.strip_pad(sample["net_input"]["src_tokens"][i], src_dict.pad()).int().cpu())
                out[sample_id] = (hyp, ref, src)
    if len(out) != len(dataset):
        raise DamageError(f"decoded {len(out)} of the {len(dataset)} sentences of {subset!r}")
    ids = sorted(out)
    return [out[i][0] for i in ids], [out[i][1] for i in ids], [out[i][2] for i in ids]


def translate(
    model,
    task,
    sentence: str,
    beam: int = 5,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    search: str = DEFAULT_BEAM_SEARCH,
) -> str:
    """The best beam hypothesis for one tokenised source sentence (Table 2's example inputs)."""
    src_dict = task.source_dictionary
    words = sentence.split()
    if not words:
        raise DamageError("an example sentence is empty")
    unknown = [w for w in words if src_dict.index(w) == src_dict.unk()]
    if unknown:
        raise DamageError(f"example {sentence!r}: not in the source dictionary: {', '.join(unknown)}")
    ids = src_dict.encode_line(sentence, add_if_not_exist=False, append_eos=True).long()
    tokens, _ = beam_decode(model, task, ids, beam, max_len_a, max_len_b, search)
    return task.target_dictionary.string(tokens.int())


def evaluate(hypotheses: Sequence[str], references: Sequence[str]) -> Dict[str, float]:
    """Exact match and Thrush's mean precision, recall and token accuracy (fractions)."""
    from lexical_offline.metrics.report import score

    result = score(hypotheses, references, metrics=("em", "thrush"))
    return {k: result[k] for k in ("n", "exact_match", "precision", "recall", "token_accuracy")}


def save_damaged(checkpoint: str, model, path: str, report: DamageReport) -> None:
    """Write ``checkpoint`` with the damaged weights (for fairseq-generate); the optimiser state is dropped (its
    moments belong to the undamaged weights) and ``extra_state["damage"]`` records the report."""
    import torch

    state = torch.load(checkpoint, map_location="cpu")  # the compatibility allow-list of fairseq_lexical.compat
    state["model"] = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    state.pop("last_optimizer_state", None)
    extra = state.get("extra_state") or {}
    extra["damage"] = {"source_checkpoint": os.path.abspath(checkpoint), **report.to_dict()}
    state["extra_state"] = extra
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    torch.save(state, path)


def run_conditions(
    model,
    task,
    model_cfg,
    conditions: Sequence[Sequence[str]],
    seed: int,
    subset: Optional[str],
    examples: Sequence[str] = (),
    beam: int = 5,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    batch_size: int = 32,
    checkpoint: Optional[str] = None,
    save_damaged_path: Optional[str] = None,
    search: str = DEFAULT_BEAM_SEARCH,
) -> List[dict]:
    """One result per condition, each starting from the undamaged weights: the report, the scores on ``subset``
    (if given) and the hypotheses for ``examples``. With ``save_damaged_path`` (``{}`` = the condition's name when
    there are several damaged conditions) each damaged model is also written as a checkpoint."""
    original = copy.deepcopy(model.state_dict())
    results = []
    damaged = [c for c in conditions if c]
    if save_damaged_path and len(damaged) > 1 and "{}" not in save_damaged_path:
        raise DamageError(
            "--save-damaged with several damaged conditions needs '{}' in the path (replaced by the "
            "condition's name, e.g. damaged_{}.pt)"
        )
    for groups in conditions:
        model.load_state_dict(original)
        report = damage(model, task, model_cfg, groups, seed)
        result = {"condition": condition_name(groups), "damage": report.to_dict()}
        if subset:
            hyps, refs, _ = generate(model, task, subset, beam, max_len_a, max_len_b, batch_size, search)
            result["scores"] = evaluate(hyps, refs)
            result["hypotheses"] = hyps
        result["examples"] = {s: translate(model, task, s, beam, max_len_a, max_len_b, search) for s in examples}
        if save_damaged_path and groups:
            path = save_damaged_path.replace("{}", condition_name(groups))
            save_damaged(checkpoint, model, path, report)
            result["saved"] = path
        results.append(result)
    model.load_state_dict(original)
    return results


def collapse_repeats(text: str, at_least: int = 4) -> str:
    """``"b b b b b"`` -> ``"b (x5)"``: runs of one word, as Table 2 shows them with an ellipsis."""
    words, out, i = text.split(), [], 0
    while i < len(words):
        j = i
        while j < len(words) and words[j] == words[i]:
            j += 1
        out.extend([words[i], f"(x{j - i})"] if j - i >= at_least else words[i:j])
        i = j
    return " ".join(out)


def format_results(results: Sequence[dict], show_parameters: bool = True) -> str:
    """Table 2 as text: one row per condition (exact match, precision, recall, token accuracy in %), then the
    example outputs (runs of 4 or more equal words collapsed to "w (xN)") and the parameters each condition
    re-initialised."""
    lines = []
    header = ("damaged", "n", "exact", "prec.", "rec.", "acc.")
    rows = []
    for r in results:
        s = r.get("scores")
        if s:
            rows.append(
                (
                    r["condition"],
                    str(s["n"]),
                    *(f"{100 * s[k]:.2f}" for k in ("exact_match", "precision", "recall", "token_accuracy")),
                )
            )
    if rows:
        widths = [max(len(row[k]) for row in [header, *rows]) for k in range(len(header))]
        for row in [header, *rows]:
            lines.append("  ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]))
    examples = [s for r in results for s in r.get("examples", {})]
    for sentence in dict.fromkeys(examples):
        lines.append("")
        lines.append(f"input: {sentence}")
        width = max(len(r["condition"]) for r in results)
        for r in results:
            lines.append(f"  {r['condition'].ljust(width)}  {collapse_repeats(r['examples'][sentence])}")
    if show_parameters:
        for r in results:
            d = r["damage"]
            if not d["groups"]:
                continue
            lines.append("")
            lines.append(
                f"{r['condition']}: re-initialised {len(d['reinitialised'])} parameters "
                f"(modules {', '.join(d['modules'])}; seed {d['seed']}), {len(d['changed'])} changed"
            )
            for n in d["reinitialised"]:
                mark = "changed" if n in d["max_abs_change"] else "unchanged (same values as initialised)"
                delta = f", max |change| {d['max_abs_change'][n]:.4g}" if n in d["max_abs_change"] else ""
                lines.append(f"  {n}: {mark}{delta}")
            for n in d["changed_outside_groups"]:
                lines.append(f"  {n}: CHANGED OUTSIDE THE GROUPS")
            if r.get("saved"):
                lines.append(f"  saved: {r['saved']}")
    return "\n".join(lines)
