"""fairseq_lexical_recipes/tasks/: what a dataset's preparation does to its text."""


def test_thrush_tokenization_of_english_chinese():
    from fairseq_lexical_recipes.tasks.eng_cmn import thrush_tokenize_pair

    assert thrush_tokenize_pair("You &apos;d better take it , Tom .", "你 最好 带 把 伞 ,   Tom 123 .") == (
        "You ' d better take it , Tom .",
        "你 最 好 带 把 伞 , Tom 123 .",
    )
