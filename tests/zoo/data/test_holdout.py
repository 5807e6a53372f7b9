"""``data.holdout_class``: a class left out of every split, its images the OOD set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import zoo.data
from zoo.data import DataError, Dataset
from zoo.data.holdout import hold_out_class
from zoo.data.sklearn_sets import load_digits
from zoo.spec.sections.data import DigitsData, IdxData, TwoMoonsData
from zoo.spec.sections.studies import PredictiveStudy

from .test_data_idx import _fake_dir


def test_digits_without_a_class_is_renumbered_and_its_images_are_ood() -> None:
    full = load_digits(DigitsData(kind="digits"), 0)
    ds = zoo.data.load(DigitsData(kind="digits", holdout_class=3), 0)
    assert DigitsData(kind="digits", holdout_class=3).n_classes == ds.n_classes == 9
    assert DigitsData(kind="digits").n_classes == 10
    assert set(np.unique(ds.y_train)) == set(range(9)) == set(np.unique(ds.y_test))
    # the same split without the class: every other image kept, classes above 3 shifted down
    keep = full.y_train != 3
    np.testing.assert_array_equal(ds.x_train, full.x_train[keep])
    y = full.y_train[keep]
    np.testing.assert_array_equal(ds.y_train, np.where(y > 3, y - 1, y))
    # OOD: all images of class 3, test split first
    n3 = int((full.y_test == 3).sum())
    assert len(ds.x_ood) == n3 + int((full.y_train == 3).sum())
    np.testing.assert_array_equal(ds.x_ood[:n3], full.x_test[full.y_test == 3])
    assert ds.x_ood.dtype == np.float32 and ds.x_ood.shape[1] == 64


def test_idx_holdout_includes_the_validation_split(tmp_path: Path) -> None:
    d = _fake_dir(tmp_path / "idx", n_train=40, n_test=20)
    ds = zoo.data.load(IdxData(kind="idx", dir=str(d), validation=10, holdout_class=9), 0)
    assert ds.n_classes == 9 and ds.y_train.max() == 8 and ds.y_val.max() == 8
    assert len(ds.x_train) == 27 and len(ds.x_val) == 9 and len(ds.x_test) == 18
    assert len(ds.x_ood) == 2 + 1 + 3  # test, validation, training images of class 9
    with pytest.raises(DataError, match="holdout_class: 12 is not a class"):
        zoo.data.load(IdxData(kind="idx", dir=str(d), validation=10, holdout_class=12), 0)


def test_holdout_needs_three_classes() -> None:
    x = np.zeros((8, 2), np.float32)
    two = Dataset(x, np.arange(8) % 2, x, np.arange(8) % 2, 2)
    with pytest.raises(DataError, match="at least 3 classes"):
        hold_out_class(two, 0)


def test_predictive_ood_kinds_follow_the_data() -> None:
    auto = PredictiveStudy(kind="predictive")
    digits = DigitsData(kind="digits")
    held = DigitsData(kind="digits", holdout_class=0)
    assert auto.ood_kinds(TwoMoonsData(kind="two_moons"), 2) == ["far"]
    assert auto.ood_kinds(digits, 64) == ["noise"]
    assert auto.ood_kinds(held, 64) == ["holdout_class", "noise"]
    one = PredictiveStudy(kind="predictive", ood="holdout_class")
    assert one.ood_kinds(held) == ["holdout_class"] and one.data_problems(held) == []
    assert "data.holdout_class" in one.data_problems(digits)[0][1]
    assert "digits or idx" in one.data_problems(TwoMoonsData(kind="two_moons"))[0][1]
    assert PredictiveStudy(kind="predictive", ood=["noise", "far"]).ood_kinds(held) == [
        "noise",
        "far",
    ]
    for bad in (["auto", "far"], ["far", "far"], []):
        with pytest.raises(ValueError, match="ood must be"):
            PredictiveStudy(kind="predictive", ood=bad)
