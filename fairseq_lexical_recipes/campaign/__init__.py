"""A GPU campaign: one command that turns a lent GPU's minutes into the papers' rows (docs/gpu.md).

    bash tools/gpu_campaign.sh prepare [--dry-run]      here: the carry folder .gpu/ and the device calls to make
    bash tools/gpu_campaign.sh start --budget-s N       there: install from .gpu/ (no network), launch detached
    bash tools/gpu_campaign.sh poll [--budget-s N]      there: wait up to ~9 min, leave progress and results in $OUT
    bash tools/gpu_campaign.sh collect DIR...           here: merge into examples/results/gpu_*.json, print rows

Modules: plan (what runs, in which order, how many fit, and each run's recipe options and command: pure), carry
(prepare), device (start, poll, process control), scheduler (what start leaves running on the device), collect.
"""
