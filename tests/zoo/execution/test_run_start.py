"""``zoo run`` checks its spec before importing torch, and a Ctrl-C before any cell started
says that nothing was computed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import zoo.data
from zoo.cli import main


def test_a_rejected_run_does_not_import_torch(tiny_spec: Path, tmp_path: Path) -> None:
    code = (
        "import sys; from zoo.cli import main; "
        f"assert main(['run', {str(tmp_path / 'typo.yaml')!r}]) == 2; "
        f"assert main(['run', {str(tiny_spec)!r}, '--set', 'model.width=-3']) == 2; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_ctrl_c_before_any_cell_says_nothing_was_computed(
    tiny_spec: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(zoo.data, "check", interrupted)  # while the data are checked
    out = tmp_path / "run"
    assert main(["run", str(tiny_spec), "--out", str(out), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert "before any cell started; nothing was computed" in err
    assert "finished cells are kept" not in err and not out.exists()
