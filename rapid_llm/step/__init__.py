"""The engine-facing model step: a decoder built from a model preset, run through the planned kernels.

`rapid-llm run` (cli.py) builds a model of a preset's shapes with seeded random weights
(`weights.py`), prefills a ragged batch of prompts into a paged KV cache (`cache.py`) and decodes
a number of steps (`model.py`), calling every op the table serves through plans (`recorder.py`
times each call and records the row that served it), once with the rows dispatch selects here and
once with every op forced to its torch reference (`run.py`), and reports both (`report.py`).

Imports torch: only `rapid-llm run` imports this package.
"""
