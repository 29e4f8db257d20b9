"""CPU torch tensors in and out of table calls, as views on the same memory (pskv.tensors)."""

from __future__ import annotations

import numpy as np
import pytest

import pskv
from pskv.errors import DTypeError, ShapeError

from helpers import free_port, together

torch = pytest.importorskip("torch")  # `make test` installs it (pskv[torch]): never skipped in CI

pytestmark = pytest.mark.timeout(60)


def test_push_and_pull_take_tensors_and_pull_gives_a_tensor(node):
    table = node.table("t", rows=10, dim=3)
    keys = torch.tensor([1, 4, 4, 9])
    table.push(keys, torch.ones(4, 3)).wait(10)
    got = table.pull(keys)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert torch.equal(got, torch.tensor([[1.0] * 3, [2.0] * 3, [2.0] * 3, [1.0] * 3]))
    assert isinstance(table.pull(np.array([4])), np.ndarray)  # numpy in, numpy out


def test_pull_into_a_tensor_writes_its_memory_and_returns_it(node):
    table = node.table("t", rows=10, dim=2)
    table.set(np.arange(10), np.arange(20, dtype=np.float32).reshape(10, 2)).wait(10)
    out = torch.zeros(3, 2)
    ptr = out.data_ptr()
    got = table.pull(torch.tensor([0, 5, 9]), out=out)
    assert got is out and out.data_ptr() == ptr
    assert out.tolist() == [[0, 1], [10, 11], [18, 19]]
    fut = table.pull_async([5], out=torch.zeros(1, 2))
    assert fut.wait(10).tolist() == [[10, 11]]
    mask, values = table.pull_if_local(torch.tensor([5, 6]))
    assert mask.tolist() == [True, True] and values.tolist() == [[10, 11], [12, 13]]


def test_a_gradient_tensor_is_pushed_without_a_copy_or_autograd(node):
    table = node.table("t", rows=4, dim=2, updater=pskv.SGD(lr=0.5))
    w = torch.ones(2, 2, requires_grad=True)
    (w * 3).sum().backward()
    table.push([0, 3], w.grad, copy=False).wait(10)
    assert table.pull([0, 3]).tolist() == [[-1.5, -1.5], [-1.5, -1.5]]
    values = pskv.store.spec.check_values(table.spec, w.grad, 2, "push")
    assert values.ctypes.data == w.grad.data_ptr()  # the same memory


def test_device_dtype_and_shape_errors_say_what_to_do(node):
    table = node.table("t", rows=4, dim=2)
    with pytest.raises(DTypeError, match=r"keys is a tensor on meta; pskv tables take CPU tensors only"):
        table.pull(torch.zeros(2, dtype=torch.int64, device="meta"))
    with pytest.raises(DTypeError, match=r"values is a torch.bfloat16 tensor that numpy cannot view"):
        table.push([0], torch.zeros(1, 2, dtype=torch.bfloat16))
    with pytest.raises(DTypeError, match="keys have dtype float32"):
        table.pull(torch.zeros(2))
    with pytest.raises(ShapeError, match=r"out has shape \(3, 2\), expected \(2, 2\)"):
        table.pull(torch.tensor([0, 1]), out=torch.zeros(3, 2))


def test_remote_rows_land_in_a_tensor_out():
    at = f"127.0.0.1:{free_port()}"
    nodes = together(*[lambda r=r: pskv.init(coordinator=at, num_nodes=2, rank=r, failure_timeout=10.0)
                       for r in range(2)])
    try:
        assert all(isinstance(n, pskv.Node) for n in nodes), nodes
        tables = together(*[lambda n=n: n.table("t", rows=100, dim=4) for n in nodes])
        keys = torch.arange(100)
        tables[1].push(keys, torch.arange(400, dtype=torch.float32).reshape(100, 4)).wait(10)
        out = torch.empty(100, 4)
        assert tables[0].pull(keys, out=out) is out  # half of the rows came from node 1
        assert torch.equal(out, torch.arange(400, dtype=torch.float32).reshape(100, 4))
    finally:
        together(*[lambda n=n: n.shutdown(timeout=5) for n in nodes if isinstance(n, pskv.Node)])
