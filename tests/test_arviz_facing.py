"""The rule that marks tests ``arviz`` (tests/arviz_facing.py): what CI runs on both lines."""

from __future__ import annotations

import ast

from tests.arviz_facing import ROOT, arviz_facing_modules, imported_names, touches_arviz


def test_imported_names_sees_every_form_of_import() -> None:
    tree = ast.parse(
        "import arviz_stats as azs\nfrom reports import kl_rhat\n"
        "def f():\n    importlib.import_module('arviz_plots')\n"
    )
    assert {"arviz_stats", "reports", "reports.kl_rhat", "arviz_plots"} <= imported_names(tree)


def test_the_modules_that_call_arviz_and_their_tests_are_marked() -> None:
    facing = arviz_facing_modules()
    assert {
        "zoo.execution.arviz_io",
        "reports.diagnostics",
        "reports.figures.diagnostics",
    } <= facing
    assert "reports.spectrum" not in facing
    tests = ROOT / "tests"
    assert touches_arviz(tests / "test_arviz_lines.py")  # imports arviz_base itself
    assert touches_arviz(tests / "reports" / "test_kl_rhat.py")  # reports/kl_rhat.py's test
    assert not touches_arviz(tests / "reports" / "test_spectrum.py")
