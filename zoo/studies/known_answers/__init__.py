"""The known-answer controls as simulations: targets with a network's pathologies, exact answers.

:func:`~zoo.studies.known_answers.ridge.run_ridge_target` (``simulation: {kind:
ridge_target}``) samples bilinear pairs on a hyperbola ridge with the zoo's NUTS in
superchains; :func:`~zoo.studies.known_answers.permutation.run_permutation_target`
(``simulation: {kind: permutation_target}``) aligns a symmetrised Gaussian over hidden
units. Each writes ``results.csv`` and a report beside the exact answers
(``docs/notes/known_answers.md``).
"""

from zoo.studies.known_answers.permutation import run_permutation_target
from zoo.studies.known_answers.ridge import run_ridge_target, sample_ridge

__all__ = ["run_permutation_target", "run_ridge_target", "sample_ridge"]
