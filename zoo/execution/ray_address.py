"""A Ray cluster address, probed before Ray is asked to connect to it.

``ray.init(address=...)`` on an address where nothing listens retries for many minutes
(834 s of warnings were measured) before it fails. :func:`check_ray_address` opens one TCP
connection to the address' host and port with a short timeout first, so a wrong or dead
address is answered in seconds, with one line.

The forms (as ``ray.init`` reads them):

- ``host:port`` (the cluster's GCS, ``ray start --head`` listens on port 6379) and
  ``ray://host[:port]`` (Ray Client, port 10001 by default) are probed; IPv6 hosts are
  written in brackets (``[::1]:6379``);
- ``auto`` is the cluster that Ray finds on this machine (its files and processes, which
  it reads at once and without retries), unless the environment variable ``RAY_ADDRESS``
  names another address, which is probed as above; ``local`` starts a new instance. Neither
  is probed otherwise.

Standard library only (no Ray, no torch import).
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

__all__ = ["DEFAULT_PORTS", "PROBE_TIMEOUT_S", "RayAddressError", "check_ray_address"]

#: Seconds the probe waits for the address to accept a TCP connection.
PROBE_TIMEOUT_S = 3.0

#: The port of an address given without one, per scheme ("" is a bare ``host:port``).
DEFAULT_PORTS = {"ray": 10001}

#: The forms of an address, for messages.
_FORMS = "host:6379 (the head node's GCS port), ray://host:10001 (Ray Client) or auto"


class RayAddressError(ValueError):
    """A Ray address that is malformed or where nothing accepts a connection."""


def _host_port(address: str) -> tuple[str, int]:
    """The host and port of ``address`` (``host:port`` or ``scheme://host[:port]``)."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "", address
    if scheme not in ("", *DEFAULT_PORTS):
        raise RayAddressError(f"scheme {scheme!r} is not one Ray connects to; give {_FORMS}")
    try:
        parts = urlsplit(f"//{rest}")
        host, port = parts.hostname, parts.port
    except ValueError as e:  # a port that is not a number or out of range
        raise RayAddressError(f"not an address ({e}); give {_FORMS}") from None
    port = port if port is not None else DEFAULT_PORTS.get(scheme)
    if not host or port is None or parts.path not in ("", "/"):
        raise RayAddressError(f"not an address of the form {_FORMS}")
    return host, port


def check_ray_address(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise :class:`RayAddressError` unless something accepts a TCP connection at ``address``.

    ``auto`` probes the address in ``RAY_ADDRESS`` if that is set (else Ray finds the
    cluster itself, at once); ``local`` is not probed. The message names the host and port
    and what failed (refused, timed out, unknown host), and says what to do.
    """
    if address in ("auto", "local"):
        env = os.environ.get("RAY_ADDRESS", "")
        if address == "local" or env in ("", "auto", "local"):
            return
        address = env
    host, port = _host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except TimeoutError:
        why = f"no answer within {timeout:g} s"
    except OSError as e:
        why = e.strerror or type(e).__name__
    else:
        return
    raise RayAddressError(
        f"nothing accepts a connection at {host} port {port} ({why}); start the cluster "
        "(ray start --head) or give the address of a running one: "
        f"{_FORMS}"
    )
