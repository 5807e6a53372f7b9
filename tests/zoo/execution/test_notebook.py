"""A run inside a Jupyter kernel (executed with nbclient): a ``tqdm.auto`` bar of the
cells (a widget with ipywidgets, else tqdm's text bar in the cell's stderr) instead of a
status line every 30 s, and a ``Run`` shown as one short line and a small HTML table, not
the resolved spec. Skipped where nbclient, nbformat or ipykernel is not installed (the
``[dev]`` extra installs them); a terminal run's output is tested in test_faults.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import specs
from zoo.execution.feedback import in_notebook

ROOT = Path(__file__).resolve().parents[3]
SPEC = specs.spec(
    "nb",
    seed=0,
    data=specs.two_moons(n_train=40, n_test=20, noise=0.1),
    model=specs.mlp(depth=1, width=3),
    inference=[specs.svi("mfvi", steps=200)],
)
WIDGET = "application/vnd.jupyter.widget-view+json"


def _notebook_outputs(tmp_path: Path) -> list[list[dict]]:
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed ([dev] extra)")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed ([dev] extra)")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed ([dev] extra)")
    specs.write_spec(tmp_path, SPEC, file="nb.yaml")
    cells = [
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport zoo",
        f"run = zoo.run({str(tmp_path / 'nb.yaml')!r}, out={str(tmp_path / 'run')!r}, "
        "workers=1, progress=True)",
        "run",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    return [c["outputs"] for c in nb.cells]


def test_a_notebook_run_shows_a_bar_and_a_short_repr(tmp_path) -> None:
    _, ran, shown = _notebook_outputs(tmp_path)
    widgets = [o for o in ran if WIDGET in o.get("data", {})]
    stderr = "".join(o.get("text", "") for o in ran if o.get("name") == "stderr")
    # tqdm's bar: a widget, or its text "cells: 100%|#####| 1/1 [...]" (no status lines)
    assert widgets or ("cells: 100%|" in stderr and "| 1/1 [" in stderr), ran
    assert "(0s in)" not in stderr and "s in)" not in stderr
    (result,) = [o for o in shown if o["output_type"] == "execute_result"]
    text, html = result["data"]["text/plain"], result["data"]["text/html"]
    assert text.startswith("Run(") and "cells: 1 ok, 0 failed, 0 pending" in text
    assert "report.md" in text and len(text) < 300 and "\n" not in text
    assert "<table>" in html and "1 ok" in html and len(html) < 1000


def test_outside_a_kernel_there_is_no_notebook() -> None:
    assert not in_notebook()
