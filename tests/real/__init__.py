"""The real-server suite (llama.cpp and vLLM serving SmolLM2-135M): `pytest -m real tests/real`.

A package so that its conftest.py is imported as `real.conftest` and never shadows the
top-level `conftest` module that the fast suite's tests import from.
"""
