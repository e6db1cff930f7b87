"""fairseq_lexical: a fairseq plugin for explicit word-level lexicons in sequence-to-sequence models.

Install with `bash tools/setup_env.sh` (it installs torch and fairseq-fixed in the order that works; see the
README). `pip install -e .` alone works in an environment that already has both.
"""
from setuptools import find_packages, setup

setup(
    name="fairseq_lexical",
    version="0.1.0",
    description="Lexical translation, copy and disentangling heads for fairseq sequence-to-sequence models",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["fairseq_lexical", "fairseq_lexical.*"]),
    install_requires=[
        # Pinned: a bare torch requirement resolves to the CUDA build and gigabytes of wheels on a CPU machine.
        "torch==2.13.0",
        # The fork of fairseq 0.12 that imports on Python 3.11. Never plain fairseq (0.12.2 breaks there).
        "fairseq-fixed==0.12.3.1",
        "numpy",
        "scipy",
        # The lexicon learners' kernels (EM, Metropolis-Hastings); they run without it, slowly.
        "numba==0.68.1",
        "sacrebleu>=2.3",
        "tqdm",
        "matplotlib",
    ],
    extras_require={
        "test": ["pytest", "hypothesis"],
        # fast_align itself, as the reference aligner of `tools/build_lexicon.py --aligner fast_align`.
        "fast_align": ["systran-align==3.5.0"],
        # the joint subword model of examples/cat_oci
        "sentencepiece": ["sentencepiece==0.2.1"],
    },
)
