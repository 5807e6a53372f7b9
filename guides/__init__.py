"""Pyro guides for Bayesian neural networks, usable in any Pyro model.

This package never imports ``zoo``.
"""

from guides.mean_field import AutoMeanField

__all__ = ["AutoMeanField"]
