"""The families of the recipes' rows (ModelFamily): LSTM (lex_lstm's rows), LLA (Thrush 2020's lla_lstm) and
TRANSFORMER (the lex_transformer and rdangle_transformer rows). A family owns what its rows share: their fairseq
architecture at each size, the fairseq-train options it adds to a row's own, its training schedule, the evaluated
checkpoint, and whether its rows take --replicas, --cuda-graphs, 'all' in --models, --damage and Thrush's scores. The
rows themselves (label, arch, lexicon, options) are catalogue.MODELS'.

The architectures are named in a table (ModelFamily.archs), not built by a rule on strings: the recipes import
neither fairseq nor torch (a recipe process starts fast, --dry-run prints every command without them), and
tests/recipes/test_families.py checks every name of the table against fairseq's ARCH_MODEL_REGISTRY once the plugin
is imported, so an arch renamed or missing in fairseq_lexical/models/ fails there, not in a run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple

from fairseq_lexical_recipes import commands, lla
from fairseq_lexical_recipes.settings import HParams, LlaSettings, TransformerSettings

if TYPE_CHECKING:
    from fairseq_lexical_recipes.catalogue import ModelSpec
    from fairseq_lexical_recipes.invocation import Invocation

# The LSTM decoder of the authors' released code (ekinakyurek/lexical, src/decoder.py), which produced the paper's
# numbers: attentional output W [e(y_t-1); o_t-1; h_t; c_t] + b without tanh, N(0, 1) embeddings and, for the
# lexical rows, the gate as a "copy" word of p_write's softmax. On Colors it is the difference between ~0.1 and the
# paper's 0.79 (examples/RESULTS.md). `--decoder fairseq` gives fairseq's LSTM (tanh Luong output, eq. 6's gate).
AUTHORS_DECODER = ("--decoder-output", "combined", "--embedding-init", "normal")
AUTHORS_GATE = ("--gate-form", "copy-token", "--gate-features", "output")
# ... and their output masking on the lexical rows: -99999 on <s>, <pad> and <unk> after the copy mixture. A source
# word without a lexicon entry translates to <unk> in ours (<pad> in theirs), so without the mask every look at such a
# word costs the lexicon branch its mass, and at 512 units p_write wins for good (docs/authors_code.md, "At the
# paper's width"). With the authors' initialisation (lex_lstm's default for their decoder) the paper's rows learn.
AUTHORS_OUTPUTS = ("--exclude-special-outputs",)

# Full size of the Transformer rows = fairseq's `transformer_iwslt_de_en` (6 + 6 layers, 512, FFN 1024, 4 heads,
# dropout 0.3), the configuration the R-Dangle paper (Zheng & Lapata 2023, section 5 and appendix C) uses for its
# Transformer and Dangle baselines. lex_transformer itself has fairseq's `transformer` sizes, so the rows built on it
# give these options; the CPU sizes (the _tiny archs) leave them out.
IWSLT_SIZES = (
    "--encoder-embed-dim",
    "512",
    "--decoder-embed-dim",
    "512",
    "--encoder-ffn-embed-dim",
    "1024",
    "--decoder-ffn-embed-dim",
    "1024",
    "--encoder-attention-heads",
    "4",
    "--decoder-attention-heads",
    "4",
    "--encoder-layers",
    "6",
    "--decoder-layers",
    "6",
    "--dropout",
    "0.3",
)

# The sizes of the table: the paper's, and the CPU presets' (settings.arch_size: by the LSTM rows' hidden size).
SIZES = ("paper", "small", "medium")


@dataclass(frozen=True, eq=False)
class ModelFamily:
    """What the rows of one family share (the base: the rows trained by updates with the task's validation). There
    is one object per family (LSTM, LLA, TRANSFORMER), compared by identity."""

    name: str
    fairseq_models: Tuple[str, ...]  # the plugin's models whose architectures the rows use
    archs: Mapping[str, Mapping[str, str]]  # a row's (paper-size) arch -> its arch at each of SIZES
    replicas: bool = False  # a row's seeds may train in one process (fairseq-train --replica-seeds)
    cuda_graphs: bool = False  # fairseq-train takes --cuda-graphs (fairseq_lexical/modules/cuda_graph_step.py)
    in_all: bool = False  # --models all: the rows of Akyurek & Andreas' tables
    damage: bool = False  # --damage (tools/damage.py, Thrush 2020's Table 2) and Thrush's views in the report
    score_options: Tuple[str, ...] = ()  # what tools/score.py adds for its rows

    def arch(self, row_arch: str, size: str) -> str:
        """The fairseq arch of a row (its paper-size ``row_arch``) at ``size`` (one of SIZES)."""
        return self.archs[row_arch][size]

    def row_options(self, extra: Tuple[str, ...], size: str) -> Tuple[str, ...]:
        """The row's own fairseq-train options (ModelSpec.extra) at ``size``."""
        return extra

    def added_options(self, spec: "ModelSpec", hp: HParams, lla_settings: LlaSettings) -> List[str]:
        """The model options the family adds after the row's own."""
        return []

    def training(self, invocation: "Invocation", patience: Optional[int]) -> Dict[str, List[str]]:
        """commands.fairseq_train's criterion, optimisation, batching, schedule and ``after`` of a row: validation
        and ``patience`` (early stopping) are the task's."""
        raise NotImplementedError

    def max_update(self, hp: HParams, ts: TransformerSettings) -> Optional[int]:
        """The rows' training length in updates (None: trained in epochs)."""
        return hp.max_update

    def training_text(self, hp: HParams, ts: TransformerSettings, lla_settings: LlaSettings) -> str:
        """What "training" says of a run: " (8000 updates max)"."""
        return f" ({self.max_update(hp, ts)} updates max)"

    def evaluated_checkpoint(self, hp: HParams, lla_settings: LlaSettings) -> str:
        """The file name of the checkpoint a run decodes."""
        return f"checkpoint_{hp.checkpoint}.pt"

    def run_config(self, ts: TransformerSettings) -> Dict[str, object]:
        """What a run's config.json adds of the family's settings."""
        return {}

    def resume_rule(self, lla_settings: LlaSettings) -> Dict[str, object]:
        """execute.RunSpec's ``resumable`` and ``why_not`` where an unfinished run cannot always resume."""
        return {}

    def reads_selection(self, lla_settings: LlaSettings) -> bool:
        """Whether a run's training ends by reading what the task selected (lla.with_lla_selection)."""
        return False


@dataclass(frozen=True, eq=False)
class LstmFamily(ModelFamily):
    """Akyurek & Andreas (2021)'s rows: appendix C.1's schedule (HParams), the authors' decoder, p_write dropout."""

    def added_options(self, spec: "ModelSpec", hp: HParams, lla_settings: LlaSettings) -> List[str]:
        out = []
        if hp.write_dropout and (hp.write_dropout_models == "all" or spec.lexical):
            out += ["--write-dropout", str(hp.write_dropout)]
        if hp.decoder == "authors":
            out += list(AUTHORS_DECODER) + (list(AUTHORS_GATE + AUTHORS_OUTPUTS) if spec.lexical else [])
        return out

    def training(self, invocation: "Invocation", patience: Optional[int]) -> Dict[str, List[str]]:
        hp = invocation.hp
        return {**commands.lstm_training(hp), "after": commands.validation(hp.validate_every, patience)}


@dataclass(frozen=True, eq=False)
class TransformerFamily(ModelFamily):
    """The Transformer rows: fairseq's transformer_iwslt_de_en recipe (TransformerSettings), no p_write dropout (the
    R-Dangle paper's models have none); at the CPU sizes their own options lose the full-size ones (IWSLT_SIZES)."""

    def row_options(self, extra: Tuple[str, ...], size: str) -> Tuple[str, ...]:
        if size == "paper":
            return extra
        full_size = set(IWSLT_SIZES[0::2])
        pairs = list(zip(extra[0::2], extra[1::2]))
        return tuple(a for opt, val in pairs if opt not in full_size for a in (opt, val))

    def training(self, invocation: "Invocation", patience: Optional[int]) -> Dict[str, List[str]]:
        hp = invocation.hp
        return {
            **commands.transformer_training(invocation.ts),
            "after": commands.validation(hp.validate_every, patience),
        }

    def max_update(self, hp: HParams, ts: TransformerSettings) -> Optional[int]:
        return ts.max_update

    def run_config(self, ts: TransformerSettings) -> Dict[str, object]:
        return {"transformer": asdict(ts)}


@dataclass(frozen=True, eq=False)
class LlaFamily(ModelFamily):
    """Thrush (2020)'s rows: one fairseq-train call of the task lla_translation with its own schedule in epochs and
    model selection (LlaSettings, lla.py), Thrush's scores, --damage."""

    def added_options(self, spec: "ModelSpec", hp: HParams, lla_settings: LlaSettings) -> List[str]:
        return ["--lexicon-unit-epochs", str(lla_settings.lexicon_epochs)]

    def training(self, invocation: "Invocation", patience: Optional[int]) -> Dict[str, List[str]]:
        return lla.training(invocation)  # (its own --patience rule: lla.lla_patience)

    def max_update(self, hp: HParams, ts: TransformerSettings) -> Optional[int]:
        return None

    def training_text(self, hp: HParams, ts: TransformerSettings, lla_settings: LlaSettings) -> str:
        return f", {lla_settings.describe()}"

    def evaluated_checkpoint(self, hp: HParams, lla_settings: LlaSettings) -> str:
        return lla.checkpoint_name(lla_settings)

    def resume_rule(self, lla_settings: LlaSettings) -> Dict[str, object]:
        # an lla run stopped within the Lexicon Unit epochs cannot resume (lla.Resumable)
        return {"resumable": lla.Resumable(lla_settings), "why_not": lla.LLA_NOT_RESUMABLE}

    def reads_selection(self, lla_settings: LlaSettings) -> bool:
        return lla_settings.checkpoint == "best"


def _sizes(paper: str, small: str, medium: Optional[str] = None) -> Dict[str, str]:
    return {"paper": paper, "small": small, "medium": medium or small}


LSTM = LstmFamily(
    "lstm",
    ("lex_lstm",),
    {
        "lex_lstm": _sizes("lex_lstm", "lex_lstm_small", "lex_lstm_medium"),
        "lstm_plain": _sizes("lstm_plain", "lstm_plain_small", "lstm_plain_medium"),
    },
    replicas=True,
    cuda_graphs=True,
    in_all=True,
)
# one CPU size: lla_lstm_small
LLA = LlaFamily(
    "lla", ("lla_lstm",), {"lla_lstm": _sizes("lla_lstm", "lla_lstm_small")}, damage=True, score_options=("--thrush",)
)
# one CPU size: the _tiny archs (64, FFN 64, 2 heads, 2 + 2 layers; R-Dangle k1 = k2 = 1)
TRANSFORMER = TransformerFamily(
    "transformer",
    ("lex_transformer", "rdangle_transformer"),
    {
        "lex_transformer": _sizes("lex_transformer", "lex_transformer_tiny"),
        "pgn_transformer": _sizes("pgn_transformer", "lex_transformer_tiny"),
        "dangle_transformer": _sizes("dangle_transformer", "rdangle_transformer_tiny"),
        "rdangle_transformer_iwslt_de_en": _sizes("rdangle_transformer_iwslt_de_en", "rdangle_transformer_tiny"),
    },
)
FAMILIES = (LSTM, LLA, TRANSFORMER)
