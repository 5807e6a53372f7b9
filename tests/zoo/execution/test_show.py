"""``zoo show`` describes the model as it is: each prior by its own name, ``obs`` at the
size of the training set."""

from __future__ import annotations

from pathlib import Path

from zoo.cli import main

SPEC = """\
name: show_noise
data: {kind: teacher, n_train: 500, n_test: 20, width: 3}
model: {kind: mlp, depth: 1, width: 4}
likelihood: {kind: gaussian, noise: learned, noise_prior_scale: 2.0}
inference:
  - {name: m, kind: svi, guide: {kind: mean_field}, steps: 2}
studies: []
"""


def test_show_names_the_noise_prior_and_the_data_size(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    assert main(["show", str(spec)]) == 0
    sites = {
        line.split()[0]: line
        for line in capsys.readouterr().out.split("# sample sites")[1].splitlines()[2:]
    }
    assert sites["noise"].endswith("shape=()           HalfNormal(scale=2)"), sites["noise"]
    assert "observed shape=(500,) " in sites["obs"] and "loc=" not in sites["obs"]
    assert (
        "shape=(4, 1)" in sites["layer0.weight"]
        and "Normal(loc=0, scale=1)" in sites["layer0.weight"]
    )
