"""bench: what the OpenSandbox plugin costs over talking to OpenSandbox directly.

``python -m bench [--quick] [--out DIR] [--cases ...]`` -- see bench/README.md.
"""
