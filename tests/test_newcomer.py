"""What a newcomer trips over first: documented overrides that must work on the default
spec, ``zoo status`` words, the report's text, and the commands' help."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "specs" / "two_moons_depth.yaml"


@pytest.mark.parametrize("item", ["inference=[mfvi]", "inference.nuts=null"])
def test_dropping_the_sampler_skips_its_studies_with_a_warning(item: str, capsys) -> None:
    spec = load_spec(DEFAULT, [item])
    assert [m.name for m in spec.inference] == ["mfvi"]
    assert [s.kind for s in spec.studies] == ["laplace"]  # the one that applies to svi
    assert len(spec.cells()) == 12
    err = capsys.readouterr().err
    for k, kind in ((0, "price_of_mean_field"), (2, "predictive")):
        assert f"warning: studies[{k}]: the {kind} study records no cell once --set " in err
        assert "dropped nuts" in err and "it is skipped" in err
