"""The tests' helpers (conftest.py holds the fixtures only): environment (paths, programs, marks), toy_data
(the toy tasks and data layouts), models (building and saving models in-process), tiny_runs (the session's tiny
training runs), model_checks (invariants every model passes), and the reference implementations kept for tests
(lstm_reference, rdangle_reference)."""
