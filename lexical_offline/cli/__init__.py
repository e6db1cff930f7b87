"""Command-line programs, installed as console entry points (setup.py)."""

# fairseq_lexical.sequence_generator's searches; spelled here too because these programs parse options without torch.
BEAM_SEARCHES = ("keep-best", "fairseq")


def add_beam_search_argument(parser) -> None:
    """--beam-search, as fairseq-generate's with --task lexical_translation (docs/search.md)."""
    parser.add_argument(
        "--beam-search",
        choices=BEAM_SEARCHES,
        default="keep-best",
        help="keep-best (default): a sentence ends only when no hypothesis in the beam can beat the "
        "best ended one, never below greedy decoding; fairseq: fairseq's search, which ends it "
        "once --beam hypotheses have ended (docs/search.md)",
    )
