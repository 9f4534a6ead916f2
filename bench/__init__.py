"""A side-by-side benchmark of netweir-serve and ``netweir serve``.

``python -m bench`` (or ``--quick``, ``--smoke``); see bench/run.py and
docs/performance.md.
"""
