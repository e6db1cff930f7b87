"""fairseq_lexical_recipes/families.py: the families of the recipes' rows. Their arch table names the plugin's
registered architectures (the recipes cannot import fairseq to ask): pinned here against fairseq's registry."""

import contextlib
import io

from fairseq_lexical_recipes.catalogue import MODELS, parse_models, rows_of
from fairseq_lexical_recipes.families import FAMILIES, LLA, LSTM, SIZES, TRANSFORMER
from fairseq_lexical_recipes.settings import CPU_LSTM_ARCH_SIZES, arch_size


def test_every_arch_of_the_table_is_registered_by_the_familys_fairseq_models():
    with contextlib.redirect_stderr(io.StringIO()):  # fairseq's import-time notices
        import fairseq_lexical  # noqa: F401  (registers the plugin's models and archs)
        from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY

    for family in FAMILIES:
        for row_arch, sizes in family.archs.items():
            assert set(sizes) == set(SIZES), (family.name, row_arch)
            for size, arch in sizes.items():
                assert arch in ARCH_MODEL_REGISTRY, (family.name, row_arch, size, arch)
                assert ARCH_MODEL_NAME_REGISTRY[arch] in family.fairseq_models, (family.name, arch)
    # every CPU size of the LSTM rows has its own arch of the lex_lstm model
    registered = {a for a, model in ARCH_MODEL_NAME_REGISTRY.items() if model == "lex_lstm"}
    assert {LSTM.arch(a, size) for a in LSTM.archs for size in SIZES} == registered


def test_each_row_is_in_its_familys_table_and_the_cpu_sizes_are_the_tables():
    assert set(CPU_LSTM_ARCH_SIZES.values()) | {"paper"} == set(SIZES)
    for name, spec in MODELS.items():
        assert spec.arch in spec.family.archs, name
    assert arch_size("paper", 64) == "paper" and arch_size("cpu-medium", 256) == "medium"
    assert (
        LSTM.arch("lstm_plain", "medium") == "lstm_plain_medium" and LLA.arch("lla_lstm", "medium") == "lla_lstm_small"
    )
    assert rows_of(LLA) == ("lla", "lla_noadv") and "pgn" in rows_of(TRANSFORMER)


def test_what_each_family_decides():
    """Replicas and CUDA graphs: the LSTM rows only; --damage and Thrush's scores: the lla rows; 'all': Akyurek &
    Andreas' rows; the joined dictionary: pgn's row."""
    assert [f.name for f in FAMILIES if f.replicas] == [f.name for f in FAMILIES if f.cuda_graphs] == ["lstm"]
    assert [f.name for f in FAMILIES if f.damage] == ["lla"] and LLA.score_options == ("--thrush",)
    assert set(parse_models("all", None)) == set(rows_of(LSTM))
    assert [m for m, spec in MODELS.items() if spec.joined_dictionary] == ["pgn"]
    assert MODELS["lla"].adversary and not MODELS["lla_noadv"].adversary and not MODELS["simple"].adversary
    extra = MODELS["lex_transformer"].extra
    assert TRANSFORMER.row_options(extra, "paper") == extra and TRANSFORMER.row_options(extra, "small") == ()
    assert TRANSFORMER.row_options(MODELS["dangle"].extra, "small") == MODELS["dangle"].extra
