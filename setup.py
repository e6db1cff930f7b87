"""fairseq_lexical: a fairseq plugin for explicit word-level lexicons in sequence-to-sequence models.

The requirements are the supported ranges; constraints.txt holds the exact versions the project is tested with.
`bash tools/setup_env.sh` installs those (reusing a torch already there; see the README). `pip install .` into an
environment that has a supported torch keeps that torch. fairseq-fixed has binary wheels for Python 3.12 only;
elsewhere it compiles, and should be built against the torch present: install it first with
`pip install --no-build-isolation fairseq-fixed` (tools/setup_env.sh does).
"""

from setuptools import find_packages, setup

setup(
    name="fairseq_lexical",
    version="0.1.0",
    description="Lexical translation, copy and disentangling heads for fairseq sequence-to-sequence models",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(
        include=["fairseq_lexical", "fairseq_lexical.*", "lexical_offline", "lexical_offline.*"]
        + ["fairseq_lexical_recipes", "fairseq_lexical_recipes.*"]  # the paper recipes (examples/*/run.sh)
    ),
    install_requires=[
        # Lowest tested: 2.4.1 (CUDA 12.1 build, on the CPU): the suite passes but for the tests of torch >= 2.6's
        # safe loading (weights_only by default), which 2.4 does not do. constraints.txt has 2.13.0.
        "torch>=2.4",
        # The fork of fairseq 0.12 that imports on Python 3.11. Never plain fairseq (0.12.2 breaks there).
        "fairseq-fixed>=0.12.3.1,<0.13",
        "numpy",
        "scipy",
        # The lexicon learners' kernels (EM, Metropolis-Hastings); they run without it, slowly. 0.60: NumPy 2.
        "numba>=0.60",
        "sacrebleu>=2.3",
        "tqdm",
        "matplotlib",
    ],
    entry_points={
        "console_scripts": [
            # the offline programs (lexical_offline: no fairseq start-up)
            "fairseq-lexical-build-lexicon = lexical_offline.cli.build_lexicon:main",
            "fairseq-lexical-score = lexical_offline.cli.score:main",
            "fairseq-lexical-plot-lexicon = lexical_offline.cli.plot_lexicon:main",
            "fairseq-lexical-split-by-overlap = lexical_offline.cli.split_by_overlap:main",
            "fairseq-lexical-select-compositional = lexical_offline.cli.select_compositional:main",
            "fairseq-lexical-plot-by-degree = lexical_offline.cli.plot_by_degree:main",
            "fairseq-lexical-aggregate-results = lexical_offline.cli.aggregate_results:main",
            "fairseq-lexical-unk-markers = lexical_offline.cli.unk_markers:main",
            "fairseq-lexical-user-dir = lexical_offline.cli.user_dir:main",
            # the programs over trained models (fairseq_lexical)
            "fairseq-lexical-damage = fairseq_lexical.cli.damage:main",
            "fairseq-lexical-plot-gates = fairseq_lexical.cli.plot_gates:main",
            "fairseq-lexical-explain = fairseq_lexical.cli.explain:main",
        ],
    },
    extras_require={
        # pytest-xdist: tools/test.sh runs the test files in parallel workers
        "test": ["pytest", "pytest-xdist", "hypothesis", "ruff"],
        # fairseq-train --tensorboard-logdir writes nothing without it (fairseq only logs a warning).
        "logging": ["tensorboard"],
        # fast_align itself, as the reference aligner of `tools/build_lexicon.py --aligner fast_align`.
        "fast_align": ["systran-align>=3.5,<4"],
        # the joint subword model of examples/cat_oci
        "sentencepiece": ["sentencepiece>=0.2"],
    },
)
