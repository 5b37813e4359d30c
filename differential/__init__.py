"""Differential check of the mock's execd against a real execd binary (QUIRKS.md, Accepted differences).

``python -m differential --execd-bin PATH`` runs the corpus (derived from execd's route
table, components/execd/pkg/web/router.go at 3bb6fad) against the binary - only ever inside an
isolated throw-away sandbox view - and against the mock's execd in ``v1.1.0`` mode, and prints the
coverage report: routes x cases, agreement, the differences QUIRKS.md accepts and the ones it
does not. Standard library only.
"""

from differential.harness import Accepted, Case, CaseResult, Ctx, load_accepted, run_case
from differential.runner import Pair, report, run_corpus

__all__ = ["Accepted", "Case", "CaseResult", "Ctx", "Pair", "load_accepted", "report", "run_case", "run_corpus"]
