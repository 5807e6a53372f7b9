"""Old home of the data loaders, kept so that ``from zoo.data import base`` still works.

New code imports from :mod:`zoo.data` (``Dataset``, ``load``, ``LOADERS``) or from the
module of one data set (:mod:`zoo.data.sklearn_sets`, :mod:`zoo.data.csv`, ...).
"""

from __future__ import annotations

from zoo.data.csv import load_csv
from zoo.data.dataset import Dataset
from zoo.data.sklearn_sets import load_digits, load_two_moons

__all__ = ["Dataset", "load_csv", "load_digits", "load_two_moons"]
