"""A GPU campaign: one command that turns a lent GPU's minutes into the papers' rows (docs/gpu.md).

    bash tools/gpu_campaign.sh prepare [--dry-run]      here: the carry folder .gpu/ and the device calls to make
    bash tools/gpu_campaign.sh start --budget-s N       there: install from .gpu/ (no network), launch detached
    bash tools/gpu_campaign.sh poll [--budget-s N]      there: wait up to ~9 min, leave progress and results in $OUT
    bash tools/gpu_campaign.sh collect DIR...           here: merge into examples/results/gpu_*.json, print rows

Modules: plan (what runs, in which order, how many fit, and each run's recipe options and command: pure), carry
(prepare: the carry folder), requirements (packages' requirements, also tools/install_helpers.py's), device (the
start and poll steps), state (the state directory on the device, and what a run's record goes through), processes
(the campaign's processes: their environment, stop files, signals, CUDA MPS), graphs (start's check of CUDA graphs),
scheduler (what start leaves running on the device), collect. The checks start runs on the device are scripts of
tools/ (device_checks.py, cuda_graph_check.py, lease_check.py).
"""
