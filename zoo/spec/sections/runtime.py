"""The ``runtime`` section of a spec: where and in which precision the cells compute.

``device`` is ``cpu``, ``cuda`` or ``cuda:N``; whether CUDA is there is checked when a run
starts (:class:`zoo.execution.runtime.Runtime`), not here, so a spec for a GPU machine validates
anywhere. ``zoo run --device`` overrides it. No torch import here.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from zoo.spec.base import Section

__all__ = ["RuntimeSection"]

_DEVICE = re.compile(r"cpu|cuda(:[0-9]{1,3})?")


class RuntimeSection(Section):
    """Device, floating-point precision and CPU threads of the cells."""

    device: str = Field("cpu", description="Torch device: cpu, cuda or cuda:N.")
    dtype: Literal["float32", "float64"] = Field(
        "float32", description="Floating-point precision of data, weights and samplers."
    )
    threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="CPU threads per worker (torch.set_num_threads); null: torch's.",
    )

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not _DEVICE.fullmatch(v):
            raise ValueError(f"device {v!r}: give cpu, cuda or cuda:N (e.g. cuda:0)")
        return v
