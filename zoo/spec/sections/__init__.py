"""Spec sections, one module per domain, each ending with its discriminated union.

``data`` (DataSpec), ``models`` (ModelSpec), ``priors`` (PriorSpec, BiasPriorSpec),
``likelihoods`` (LikelihoodSpec), ``inference`` (GuideSpec, InferenceSpec; the samplers'
sections in ``samplers``), ``studies`` (a folder with one module per study; StudySpec),
``simulation`` (SimulationSpec), ``report`` (MetricsSpec, ReportSpec) and ``runtime``
(RuntimeSection). A section declares the facts other code asks of it (a data set's
``task``, a network's ``samplable``, a method's ``family``, a study's ``families``); kinds
are compared only in here.
"""
