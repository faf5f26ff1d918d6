"""A ``torch.save``d ``TensorDataset`` of CPU tensors read without torch (its import is most of a paper set's job).

``torch.save`` writes a zip: ``<prefix>/data.pkl``, a pickle whose tensors name their storages by a persistent id
``("storage", <storage class>, key, location, size)``, and ``<prefix>/data/<key>``, each storage's bytes in the order
``<prefix>/byteorder`` names (little-endian where it is absent). The pickle is read by an unpickler whose
``find_class`` knows four globals and nothing else (the Python documentation's "Restricting Globals"):
``torch.utils.data.dataset.TensorDataset``, ``torch._utils._rebuild_tensor_v2``, the typed storage classes
(``torch.DoubleStorage`` ...) and ``collections.OrderedDict`` (a tensor's empty backward hooks), each mapped to a
stand-in here. Any other global is refused (:class:`RefusedGlobal`) before it is looked up, so nothing the file
names is imported or called. A tensor is a numpy array copied out of its storage's bytes once its offset, shape and
strides have been checked to stay inside them.
"""

from __future__ import annotations

import collections
import io
import math
import pickle
import zipfile
from typing import Any

import numpy as np

STORAGE_DTYPES = {
    "DoubleStorage": ("torch.float64", "f8"),
    "FloatStorage": ("torch.float32", "f4"),
    "HalfStorage": ("torch.float16", "f2"),
    "LongStorage": ("torch.int64", "i8"),
    "IntStorage": ("torch.int32", "i4"),
    "ShortStorage": ("torch.int16", "i2"),
    "CharStorage": ("torch.int8", "i1"),
    "ByteStorage": ("torch.uint8", "u1"),
    "BoolStorage": ("torch.bool", "b1"),
    "ComplexDoubleStorage": ("torch.complex128", "c16"),
    "ComplexFloatStorage": ("torch.complex64", "c8"),
}
"""torch's typed storage classes read here: class name -> (torch's dtype name, numpy's type code)."""


class TorchFileError(ValueError):
    """The bytes are not a ``torch.save`` zip this reader understands (the message says what is wrong)."""


class RefusedGlobal(TorchFileError):
    """The pickle names a global other than the four a TensorDataset of tensors needs: ``name`` is ``module.name``."""

    def __init__(self, name: str):
        super().__init__(f"global {name}")
        self.name = name


class TensorDataset:
    """Stand-in for ``torch.utils.data.TensorDataset``: the pickle sets its ``tensors``."""

    tensors: Any = None


class Tensor:
    """A tensor read from the file: torch's ``dtype`` name (``torch.float64``) and its values as a numpy array."""

    def __init__(self, dtype: str, array: np.ndarray):
        self.dtype = dtype
        self.array = array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def ndim(self) -> int:
        return self.array.ndim


class _StorageClass:
    """Stand-in for one of torch's typed storage classes (a persistent id's second item)."""

    def __init__(self, name: str, byteorder: str):
        self.dtype_name, code = STORAGE_DTYPES[name]
        self.numpy = np.dtype(code if code in ("i1", "u1", "b1") else byteorder + code)


class _Storage:
    def __init__(self, kind: _StorageClass, values: np.ndarray):
        self.kind = kind
        self.values = values


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _Unpickler(pickle.Unpickler):
    def __init__(self, archive: zipfile.ZipFile, prefix: str, byteorder: str):
        super().__init__(io.BytesIO(archive.read(f"{prefix}data.pkl")))
        self.archive = archive
        self.prefix = prefix
        self.byteorder = byteorder
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch.utils.data.dataset", "TensorDataset"):
            return TensorDataset
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return self.rebuild_tensor
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageClass(name, self.byteorder)
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        raise RefusedGlobal(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> _Storage:
        if not (
            isinstance(pid, tuple)
            and len(pid) == 5
            and pid[0] == "storage"
            and isinstance(pid[1], _StorageClass)
            and isinstance(pid[2], str)
            and _whole(pid[4])
        ):
            raise TorchFileError(f"a storage reference that is not (storage, type, key, location, size): {pid!r:.80}")
        kind, key, size = pid[1], pid[2], pid[4]
        if key not in self.storages:
            try:
                raw = self.archive.read(f"{self.prefix}data/{key}")
            except KeyError:
                raise TorchFileError(f"storage {key!r} is missing from the archive") from None
            if len(raw) < size * kind.numpy.itemsize:
                raise TorchFileError(f"storage {key!r} holds {len(raw)} bytes, fewer than its {size} values")
            self.storages[key] = _Storage(kind, np.frombuffer(raw, dtype=kind.numpy, count=size))
        storage = self.storages[key]
        if storage.kind.numpy != kind.numpy or len(storage.values) != size:
            raise TorchFileError(f"storage {key!r} is named with two types or sizes")
        return storage

    @staticmethod
    def rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> Tensor:
        """``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])``."""
        if not (
            isinstance(storage, _Storage)
            and _whole(offset)
            and isinstance(size, tuple)
            and isinstance(stride, tuple)
            and len(size) == len(stride)
            and all(_whole(n) for n in (*size, *stride))
        ):
            raise TorchFileError("a tensor whose storage, offset, shape or strides are not what torch.save writes")
        values = storage.values
        if math.prod(size) == 0:
            array = np.empty(size, dtype=values.dtype)
        else:
            last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
            if last >= len(values):
                raise TorchFileError(
                    f"a tensor of shape {size}, offset {offset} and strides {stride} reaches past its storage's "
                    f"{len(values)} values"
                )
            item = values.dtype.itemsize
            view = np.lib.stride_tricks.as_strided(
                values[offset:], shape=size, strides=tuple(s * item for s in stride), writeable=False
            )
            array = view.copy()
        return Tensor(storage.kind.dtype_name, array.astype(array.dtype.newbyteorder("="), copy=False))


def read_torch_file(data: bytes) -> Any:
    """The object a ``torch.save`` zip holds, its tensors as :class:`Tensor`, its TensorDataset as
    :class:`TensorDataset`. :class:`RefusedGlobal` for a global beyond those; :class:`TorchFileError` for anything
    else this reader cannot read (a file that is no zip, the legacy pre-1.6 format, a broken pickle or storage)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise TorchFileError("not a zip archive (torch.save's format since torch 1.6)") from None
    with archive:
        pickles = [n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise TorchFileError(f"{len(pickles)} data.pkl records in the archive, expected 1")
        prefix = pickles[0][: -len("data.pkl")]
        try:
            order = archive.read(f"{prefix}byteorder").decode("ascii")
        except KeyError:
            order = "little"
        except (UnicodeDecodeError, zipfile.BadZipFile) as e:
            raise TorchFileError(f"unreadable byteorder record: {e}") from None
        if order not in ("little", "big"):
            raise TorchFileError(f"byteorder {order!r}, expected little or big")
        try:
            return _Unpickler(archive, prefix, "<" if order == "little" else ">").load()
        except TorchFileError:
            raise
        except (
            pickle.UnpicklingError,
            EOFError,
            TypeError,
            ValueError,
            AttributeError,
            IndexError,
            KeyError,
            RecursionError,
        ) as e:
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise TorchFileError(f"unreadable pickle: {detail}") from None
        except (zipfile.BadZipFile, OSError, RuntimeError) as e:
            raise TorchFileError(f"unreadable archive: {e}") from None
