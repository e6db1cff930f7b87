"""The beam searches of fairseq_lexical.sequence_generator by name: their names, their default, the fairseq task
that offers them and the --beam-search option. Defined here, without torch, because programs parse --beam-search
before they load a model (lexical_offline's, the plugin's and the recipes')."""

BEAM_SEARCHES = ("keep-best", "fairseq")
DEFAULT_BEAM_SEARCH = "keep-best"
# the fairseq task (--task) whose generator offers them; fairseq's translation task has fairseq's search only
KEEP_BEST_TASK_NAME = "lexical_translation"


def add_beam_search_argument(parser) -> None:
    """--beam-search, as fairseq-generate's with --task lexical_translation (docs/search.md)."""
    parser.add_argument(
        "--beam-search",
        choices=BEAM_SEARCHES,
        default=DEFAULT_BEAM_SEARCH,
        help="keep-best (default): a sentence ends only when no hypothesis in the beam can beat the "
        "best ended one, never below greedy decoding; fairseq: fairseq's search, which ends it "
        "once --beam hypotheses have ended (docs/search.md)",
    )
