"""Parity measurements of this session, written out by conftest.py when RAPID_LLM_PARITY_REPORT is set.

A module of its own so that conftest.py (loaded by pytest as `conftest`) and
test_parity.py share one list through one import name.
"""

PARITY_MEASUREMENTS: list[dict] = []
