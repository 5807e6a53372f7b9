"""The forms of a Ray address and the probe before Ray connects (no Ray needed)."""

from __future__ import annotations

import socket

import pytest

from zoo.execution.ray_address import RayAddressError, check_ray_address


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_listening_address_passes_and_a_dead_one_is_named() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        check_ray_address(f"127.0.0.1:{port}")
        check_ray_address(f"ray://127.0.0.1:{port}")
    dead = _dead_port()
    with pytest.raises(
        RayAddressError, match=f"nothing accepts a connection at 127.0.0.1 port {dead}"
    ):
        check_ray_address(f"127.0.0.1:{dead}")
    with pytest.raises(RayAddressError, match="at ::1 port"):
        check_ray_address(f"[::1]:{dead}")


def test_auto_probes_only_the_address_ray_address_names(monkeypatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    check_ray_address("auto")  # Ray finds a cluster on this machine itself, at once
    check_ray_address("local")
    dead = _dead_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{dead}")
    with pytest.raises(RayAddressError, match=f"127.0.0.1 port {dead}"):
        check_ray_address("auto")


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("ray://127.0.0.1", "port 10001"),  # Ray Client's default port
        ("http://127.0.0.1:6379", "scheme 'http' is not one Ray connects to"),
        ("127.0.0.1", "not an address of the form host:6379"),
        ("127.0.0.1:99999", "not an address (Port out of range"),
    ],
)
def test_forms(address: str, says: str) -> None:
    with pytest.raises(RayAddressError) as e:
        check_ray_address(address)
    assert says in str(e.value)
