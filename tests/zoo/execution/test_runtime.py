"""Runtime: device checks, tensors, generators and threads (CPU; one CUDA test where a GPU is)."""

import dataclasses
import pickle

import numpy as np
import pytest
import torch

from tests import specs
from zoo.execution.preflight import CPU_ONLY_KINDS, check_device
from zoo.execution.runtime import Runtime, RuntimeUnavailable, parse_device
from zoo.execution.usage import UsageError

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


def test_cpu_defaults():
    rt = Runtime.cpu()
    assert rt.device == torch.device("cpu") and rt.dtype == torch.float32 and rt.threads is None
    assert Runtime.from_section(None) == rt
    assert not rt.is_cuda and rt.worker_runtimes() == [rt]


def test_frozen_and_picklable():
    rt = Runtime.cpu(torch.float64, threads=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rt.threads = 2
    assert pickle.loads(pickle.dumps(rt)) == rt


def test_from_section_object_and_mapping():
    class Section:
        device, dtype, threads = "cpu", "float64", 2

    rt = Runtime.from_section(Section())
    assert (rt.device.type, rt.dtype, rt.threads) == ("cpu", torch.float64, 2)
    assert Runtime.from_section({"dtype": "float32"}).dtype == torch.float32
    with pytest.raises(RuntimeUnavailable, match="runtime.dtype"):
        Runtime.from_section({"dtype": "float16"})


def test_device_override_wins():
    rt = Runtime.from_section({"device": "cuda:7"}, device_override="cpu")
    assert rt.device == torch.device("cpu")


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "cpu:0", "cuda:-1"])
def test_bad_device_names(bad):
    with pytest.raises(RuntimeUnavailable, match="is not a device|takes no index"):
        parse_device(bad)


@no_cuda
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_gpu_is_a_clear_error(name):
    with pytest.raises(RuntimeUnavailable) as err:
        Runtime.from_section(None, device_override=name)
    msg = str(err.value)
    assert f"--device '{name}' asked for" in msg
    assert "torch.cuda.is_available() is False" in msg and "use --device cpu" in msg
    with pytest.raises(ValueError, match="runtime.device"):
        Runtime.from_section({"device": name})


def test_cuda_index_out_of_range(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(RuntimeUnavailable, match=r"only 2 CUDA device.*cuda:0\.\.cuda:1"):
        parse_device("cuda:2", "--device")
    assert parse_device("cuda:1") == torch.device("cuda", 1)
    rt = Runtime(torch.device("cuda"))
    assert [r.device for r in rt.worker_runtimes()] == [
        torch.device("cuda", 0),
        torch.device("cuda", 1),
    ]


def test_tensor_dtypes():
    rt = Runtime.cpu(torch.float64)
    assert rt.tensor(np.zeros(3, np.float32)).dtype == torch.float64
    assert rt.tensor([1.0, 2.0]).dtype == torch.float64
    assert rt.tensor(np.arange(3)).dtype == torch.int64  # labels keep their integer kind
    assert rt.tensor(np.zeros(2, bool)).dtype == torch.bool
    assert rt.tensor(np.zeros(3), dtype=torch.float32).dtype == torch.float32
    assert rt.tensor(torch.ones(2, dtype=torch.float32)).dtype == torch.float64
    z = rt.zeros((2, 3))
    assert z.shape == (2, 3) and z.dtype == torch.float64
    np.testing.assert_array_equal(rt.numpy(rt.tensor([1.5, 2.5], dtype=torch.float32)), [1.5, 2.5])


def test_generator_is_seeded():
    rt = Runtime.cpu()
    a = torch.randn(4, generator=rt.generator(3))
    b = torch.randn(4, generator=rt.generator(3))
    c = torch.randn(4, generator=rt.generator(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert rt.generator(0).device == torch.device("cpu")


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def test_threads_scope_sets_and_restores():
    before, blas = torch.get_num_threads(), _blas_threads()
    with Runtime.cpu(threads=1).threads_scope():
        assert torch.get_num_threads() == 1
        assert all(n == 1 for n in _blas_threads())  # NumPy's BLAS shares the worker's cores
    assert torch.get_num_threads() == before
    assert _blas_threads() == blas
    with pytest.raises(KeyError), Runtime.cpu(threads=1).threads_scope():
        raise KeyError
    assert torch.get_num_threads() == before
    with Runtime.cpu().threads_scope():
        assert torch.get_num_threads() == before


@cuda
def test_cuda_runtime_round_trip():
    rt = Runtime.from_section({"device": "cuda:0", "dtype": "float64"})
    t = rt.tensor(np.arange(4.0))
    assert t.device.type == "cuda" and t.dtype == torch.float64
    g = rt.generator(0)
    assert g.device.type == "cuda"
    x = torch.randn(3, generator=g, device=rt.device, dtype=rt.dtype)
    np.testing.assert_array_equal(rt.numpy(t * 2), [0.0, 2.0, 4.0, 6.0])
    assert rt.numpy(x).shape == (3,)
    assert rt.zeros(2).device.type == "cuda"


@pytest.mark.parametrize("kind", sorted(CPU_ONLY_KINDS))
def test_cpu_only_samplers_on_cuda_are_bad_input_naming_the_method(tmp_path, kind):
    method = specs.nuts(warmup=5, draws=5) if kind == "nuts" else specs.method("hmc", "hmc")
    spec = specs.load(tmp_path, inference=[specs.svi("mfvi", steps=2), method])
    with pytest.raises(UsageError) as e:
        check_device(spec, Runtime(device=torch.device("cuda:0")))
    assert f"inference.{method['name']}: kind {kind}" in str(e.value)
    assert "kind: chees" in str(e.value) and "--device cpu" in str(e.value)
    check_device(spec, Runtime.cpu())  # the CPU runs them
    svi_only = specs.load(tmp_path, inference=[specs.svi("mfvi", steps=2)])
    check_device(svi_only, Runtime(device=torch.device("cuda:0")))
