"""The price of mean field in predictions: approximations' predictives against the draws'.

The study's table entry: its probe, its report section and the words of its columns.
"""

from zoo.studies.base import StudyPlugin
from zoo.studies.predictive.probe import APPROXIMATIONS, PredictiveProbe
from zoo.studies.predictive.report import predictive_sections

__all__ = ["HIDDEN", "LABELS", "STUDY"]

_NAMES = {"qdiag": "q_diag", "qfull": "q_full", "qmarg": "q_marg", "mfvi": "MF-VI"}
#: Input sets: the test set (no suffix), the first out-of-distribution kind (``_ood``) and
#: each further kind (``_ood_<kind>``).
_OOD_KINDS = ("far", "noise", "holdout_class")
_SETS = {"": "test", "_ood": "OOD", **{f"_ood_{k}": f"OOD {k}" for k in _OOD_KINDS}}
_PER_Q = {
    "pred_tv": ("total variation of {q}'s predictive to the samples' on {s} inputs", None),
    "pred_agree": ("agreement of {q}'s predicted classes with the samples' on {s} inputs", None),
    "pred_kl": ("KL(samples ‖ {q}) of the predictives per {s} input", "nats"),
    "pred_entropy": ("entropy of {q}'s predictive on {s} inputs", "nats"),
}
_NAMES_ALL = {**_NAMES, "samples": "the samples"}

#: The study's columns for people: metric -> (what it is; unit or None).
LABELS: dict[str, tuple[str, str | None]] = {
    **{
        f"{m}_{q}{suffix}": (text.format(q=_NAMES_ALL[q], s=where), unit)
        for m, (text, unit) in _PER_Q.items()
        for q in (*APPROXIMATIONS, *(("samples",) if m == "pred_entropy" else ()))
        for suffix, where in _SETS.items()
    },
    **{f"nll_{q}": (f"test NLL of {_NAMES_ALL[q]}'s predictive", "nats") for q in _NAMES_ALL},
    **{f"ece_{q}": (f"ECE of {_NAMES_ALL[q]}'s predictive", None) for q in _NAMES_ALL},
    **{
        f"pred_tv_floor_{q}{suffix}": (
            f"Monte Carlo floor of the TV of {_NAMES[q]}'s predictive to the samples' on "
            f"{where} inputs",
            None,
        )
        for q in APPROXIMATIONS
        for suffix, where in _SETS.items()
    },
    **{
        f"pred_tv_inflation{suffix}": (
            f"variance inflation of the samples' predictive over independent draws on {where} "
            "inputs (from the halves)",
            None,
        )
        for suffix, where in _SETS.items()
    },
    **{
        f"pred_tv_split{suffix}": (
            f"TV between the two halves of the samples' predictive on {where} inputs",
            None,
        )
        for suffix, where in _SETS.items()
    },
}
#: Text columns (which OOD inputs): no number to tabulate.
HIDDEN = frozenset({"pred_ood_kind", "pred_ood_kinds"})

STUDY = StudyPlugin(
    "predictive", PredictiveProbe, predictive_sections, labels=LABELS, hidden=HIDDEN
)
