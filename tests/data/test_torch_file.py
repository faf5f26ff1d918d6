"""The torch-free reader of torch.save'd TensorDatasets (upfl.data.torch_file) against torch.load itself: the same
values and dtypes for every storage type, views with offsets and strides, big-endian files; storages too short or
tensors reaching past them refused by name."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset as TorchTensorDataset

from upfl.data.torch_file import STORAGE_DTYPES, Tensor, TensorDataset, TorchFileError, read_torch_file


def saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def dataset(*tensors) -> TorchTensorDataset:
    ds = TorchTensorDataset.__new__(TorchTensorDataset)
    ds.tensors = tensors
    return ds


def rewritten(data: bytes, change) -> bytes:
    """The zip ``data`` with each member's bytes passed through ``change(name, bytes)``."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, change(info.filename, src.read(info.filename)))
    return out.getvalue()


def assert_same(ours: Tensor, theirs: torch.Tensor) -> None:
    assert ours.dtype == str(theirs.dtype) and ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.array, theirs.numpy())


DTYPES = [
    torch.float64,
    torch.float32,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex128,
    torch.complex64,
]


def test_every_storage_type_is_read_as_torch_reads_it():
    assert {str(d) for d in DTYPES} == {name for name, _ in STORAGE_DTYPES.values()}
    for dtype in DTYPES:
        x = (torch.arange(60, dtype=torch.float64).reshape(3, 20) % 7).to(dtype)
        y = torch.tensor([0.0, 1.0, 1.0]).to(dtype)
        obj = read_torch_file(saved(dataset(x, y)))
        assert type(obj) is TensorDataset and len(obj.tensors) == 2, dtype
        assert_same(obj.tensors[0], x)
        assert_same(obj.tensors[1], y)


def test_views_with_offsets_and_strides_and_a_shared_storage_are_read_as_torch_reads_them():
    base = torch.randn(7, 40, dtype=torch.float64)
    views = (base[2:5, ::2], base.t()[3:9], base[1], base[0:0], base[4, 7])
    data = saved(dataset(*views))
    assert len([n for n in zipfile.ZipFile(io.BytesIO(data)).namelist() if "/data/" in n]) == 1, "one storage"
    obj = read_torch_file(data)
    reference = torch.load(io.BytesIO(data), weights_only=False)
    for ours, view, theirs in zip(obj.tensors, views, reference.tensors, strict=True):
        assert_same(ours, view)
        assert_same(ours, theirs)


def test_a_big_endian_file_is_read_in_its_byte_order():
    x = torch.randn(3, 20, dtype=torch.float64)
    data = saved(dataset(x, torch.ones(3)))

    def to_big(name: str, raw: bytes) -> bytes:
        if name.endswith("/byteorder"):
            return b"big"
        if "/data/" in name and not name.endswith(".pkl"):
            width = 8 if len(raw) == 3 * 20 * 8 else 4
            return np.frombuffer(raw, dtype=f"<f{width}").astype(f">f{width}").tobytes()
        return raw

    obj = read_torch_file(rewritten(data, to_big))
    assert_same(obj.tensors[0], x)
    assert obj.tensors[0].array.dtype.isnative


def test_a_storage_shorter_than_its_size_or_a_tensor_past_its_storage_is_refused():
    data = saved(dataset(torch.zeros(3, 20, dtype=torch.float64), torch.ones(3)))
    short = rewritten(data, lambda name, raw: raw[:-8] if name.endswith("/data/0") else raw)
    with pytest.raises(TorchFileError, match=r"storage '0' holds 472 bytes, fewer than its 60 values"):
        read_torch_file(short)
    # the first tensor's offset 0 -> 5: shape (3, 20) from offset 5 ends past the 60 values
    past = rewritten(data, lambda name, raw: raw.replace(b"QK\x00", b"QK\x05", 1) if name.endswith(".pkl") else raw)
    with pytest.raises(TorchFileError, match=r"shape \(3, 20\), offset 5 .* reaches past its storage's 60 values"):
        read_torch_file(past)
    missing = rewritten(data, lambda name, raw: raw.replace(b"X\x01\x00\x00\x000", b"X\x01\x00\x00\x009", 1))
    with pytest.raises(TorchFileError, match=r"storage '9' is missing"):
        read_torch_file(missing)
