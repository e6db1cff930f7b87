"""The tests' helpers (conftest.py holds the fixtures only), imported as ``tests.helpers.<module>``: environment
(paths, programs, marks), toy_data (the toy tasks and data layouts), models (building and saving models in-process),
tiny_runs (the session's tiny training runs), model_checks (invariants every model passes), head_inputs (random
lexicon tables and head inputs), explanations, rdangle_models, score, compositional, recipes, campaign and
simulated_device (the material of those subjects' tests), and the reference implementations kept only as test
oracles (lstm_reference, rdangle_reference)."""
