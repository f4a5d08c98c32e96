"""GPU launch-config sweeps: the scripts whose results back the kernels' launch_config() docstrings.

    python -m perf.sweeps.launch_configs_norm_scale --out DIR
    python -m perf.sweeps.launch_configs_rotary_fp8_kv_gated --out DIR [--skip SECTION ...]

Run from the repository root on a CUDA machine; each writes one JSON file
into DIR (its command, device, versions and every measurement). The files
committed under perf/results/<gpu>/ are those outputs, renamed with the date
(perf/README.md lists which script wrote which file). Not benchmarks: pytest
collects nothing here.

Torch-free at import (this file only): conformance/test_evidence.py reads
FORMERLY on CPU-only CI.
"""

#: Old path -> current path of each sweep script. Committed result files record the command that
#: made them, with the script's path at the time; evidence is never edited, so the old paths they
#: cite resolve through this map (conformance/test_evidence.py checks that every cited script exists
#: here or under its old name in this map).
FORMERLY = {
    "ci/gpu_tuning_sweep.py": "perf/sweeps/launch_configs_norm_scale.py",
    "ci/gpu_sweep_rotary_fp8.py": "perf/sweeps/launch_configs_rotary_fp8_kv_gated.py",
}
