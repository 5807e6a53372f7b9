"""The runtime of a run: the device, dtype and CPU threads every tensor is made with.

A :class:`Runtime` is the one place run code turns arrays into tensors and seeds into
generators, so a device option touches this module and nothing else. It lives in a leaf
module (it imports only torch) so that every layer may take one as an argument;
``zoo.execution.runtime`` re-exports it for the run layer.

Dependency rule: this module imports torch and the standard library only, never ``zoo``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_limits

__all__ = ["DTYPES", "Runtime", "RuntimeUnavailable", "parse_device"]

#: Spec dtype names -> torch dtypes (the ``runtime.dtype`` field of a spec).
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}

_DEVICE_RE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


class RuntimeUnavailable(ValueError):
    """A device was asked for that this machine cannot provide (e.g. CUDA without a GPU)."""


def parse_device(name: str | torch.device, option: str = "device") -> torch.device:
    """Check a device name (``cpu``, ``cuda`` or ``cuda:N``) against this machine.

    Parameters
    ----------
    name : str or torch.device
        The device asked for.
    option : str
        How the caller names the setting in messages (e.g. ``"--device"`` or ``"runtime.device"``).

    Returns
    -------
    torch.device
        ``cpu``, ``cuda`` (no index: every visible GPU) or ``cuda:N``.

    Raises
    ------
    RuntimeUnavailable
        The name is not a device, CUDA is asked for where ``torch.cuda.is_available()`` is
        False, or ``N`` is not a visible GPU. The message names the option and the fix.
    """
    text = str(name)
    match = _DEVICE_RE.match(text)
    if match is None:
        raise RuntimeUnavailable(
            f"{option} {text!r} is not a device; use cpu, cuda or cuda:N (N a GPU index)"
        )
    kind, index = match.group(1), match.group(2)
    if kind == "cpu":
        if index is not None:
            raise RuntimeUnavailable(f"{option} {text!r}: cpu takes no index; use cpu")
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeUnavailable(
            f"{option} {text!r} asked for, but torch.cuda.is_available() is False "
            f"on this machine; use --device cpu (or runtime: {{device: cpu}} in the spec)"
        )
    if index is None:
        return torch.device("cuda")
    count = torch.cuda.device_count()
    if int(index) >= count:
        raise RuntimeUnavailable(
            f"{option} {text!r} asked for, but only {count} CUDA device(s) are visible "
            f"(cuda:0..cuda:{count - 1}); use --device cuda:{count - 1} or --device cpu"
        )
    return torch.device("cuda", int(index))


@dataclasses.dataclass(frozen=True)
class Runtime:
    """Where and how a cell computes: device, floating dtype and CPU threads.

    Attributes
    ----------
    device : torch.device
        ``cpu``, ``cuda`` (no index: a run spreads its workers over every visible GPU, see
        :meth:`worker_runtimes`) or ``cuda:N``.
    dtype : torch.dtype
        The floating dtype of tensors made from floating arrays (``float32`` or ``float64``).
    threads : int or None
        CPU threads torch uses inside :meth:`threads_scope`; None leaves torch's setting.
    """

    device: torch.device = torch.device("cpu")
    dtype: torch.dtype = torch.float32
    threads: int | None = None

    # -- construction -------------------------------------------------------------------
    @classmethod
    def cpu(cls, dtype: torch.dtype = torch.float32, threads: int | None = None) -> Runtime:
        """The CPU runtime (the default of a spec without a ``runtime:`` section)."""
        return cls(torch.device("cpu"), dtype, threads)

    @classmethod
    def from_section(cls, section: Any = None, device_override: str | None = None) -> Runtime:
        """Build the runtime of a spec's ``runtime:`` section, checking the device.

        Parameters
        ----------
        section : RuntimeSection, mapping or None
            Anything with ``device``, ``dtype`` and ``threads`` (attributes or keys); None
            means the defaults (cpu, float32, torch's threads).
        device_override : str, optional
            ``zoo run --device``: replaces the section's device.

        Raises
        ------
        RuntimeUnavailable
            The device cannot be had on this machine or a field is not understood.
        """

        def field(name: str, default: Any) -> Any:
            if section is None:
                return default
            if isinstance(section, dict):
                return section.get(name, default)
            return getattr(section, name, default)

        if device_override is not None:
            device = parse_device(device_override, "--device")
        else:
            device = parse_device(field("device", "cpu"), "runtime.device")
        dtype_name = field("dtype", "float32")
        dtype = dtype_name if isinstance(dtype_name, torch.dtype) else DTYPES.get(str(dtype_name))
        if dtype is None:
            raise RuntimeUnavailable(
                f"runtime.dtype {dtype_name!r} is not one of {', '.join(DTYPES)}"
            )
        threads = field("threads", None)
        return cls(device, dtype, None if threads is None else int(threads))

    # -- facts ----------------------------------------------------------------------------
    @property
    def is_cuda(self) -> bool:
        """True when tensors live on a GPU."""
        return self.device.type == "cuda"

    def worker_runtimes(self) -> list[Runtime]:
        """One runtime per worker slot: each visible GPU for ``cuda``, else this one.

        ``cuda`` without an index expands to ``cuda:0 .. cuda:{n-1}``; ``cpu`` and
        ``cuda:N`` give ``[self]``.
        """
        if self.is_cuda and self.device.index is None:
            count = torch.cuda.device_count()
            return [dataclasses.replace(self, device=torch.device("cuda", i)) for i in range(count)]
        return [self]

    def on_device(self, device: str | torch.device) -> Runtime:
        """The same runtime on another device (unchecked: the caller picked a visible one)."""
        return dataclasses.replace(self, device=torch.device(device))

    # -- tensors --------------------------------------------------------------------------
    def tensor(self, x: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A tensor of ``x`` on this device.

        Floating (and Python float) input gets :attr:`dtype` unless ``dtype`` says
        otherwise; integer and boolean input (class labels, masks) keeps its integer kind.
        """
        if dtype is None:
            kind = x.dtype if isinstance(x, (torch.Tensor, np.ndarray)) else None
            if kind is None:
                kind = np.asarray(x).dtype
            floating = (
                kind.is_floating_point if isinstance(kind, torch.dtype) else kind.kind in "fc"
            )
            if floating:
                dtype = self.dtype
        if isinstance(x, torch.Tensor):
            return x.to(device=self.device, dtype=dtype)
        return torch.as_tensor(x, dtype=dtype, device=self.device)

    def zeros(self, shape: int | Sequence[int], dtype: torch.dtype | None = None) -> torch.Tensor:
        """Zeros of ``shape`` on this device (floating :attr:`dtype` unless told)."""
        return torch.zeros(shape, dtype=dtype or self.dtype, device=self.device)

    def generator(self, seed: int) -> torch.Generator:
        """A :class:`torch.Generator` on this device, seeded with ``seed``."""
        gen = torch.Generator(device=self.device)
        gen.manual_seed(int(seed))
        return gen

    @staticmethod
    def numpy(t: torch.Tensor) -> np.ndarray:
        """The NumPy array of a tensor (detached, moved to the CPU)."""
        return t.detach().cpu().numpy()

    # -- threads --------------------------------------------------------------------------
    @contextlib.contextmanager
    def threads_scope(self) -> Iterator[None]:
        """Set torch's CPU threads, and NumPy's BLAS threads, to :attr:`threads` inside the
        block and restore them after.

        The BLAS limit matters where workers share the cores (``workers x threads <=
        cores``): left at one thread per core, every worker's NumPy linear algebra (a
        study's covariances, a stopping rule's questions) would start a thread on every
        core, and OpenBLAS's idle threads spin, taking time from the other workers' cells.
        """
        if self.threads is None:
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            with threadpool_limits(self.threads, user_api="blas"):
                yield
        finally:
            torch.set_num_threads(before)
