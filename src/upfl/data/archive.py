"""Zip archives of the real data sets: safety checks, selective extraction, streaming members.

Every entry of an archive is checked before anything is read or written: an absolute name, a
``..`` component, a drive letter or a symlink (Unix mode in the external attributes) refuses the
whole archive with :class:`ArchiveError`. Readers stream members straight from the zip, so the
700k small NIST images never land on disk; :func:`extract_zip` writes only the members asked for.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from ..files import atomic_path


class ArchiveError(ValueError):
    """An archive is unreadable, truncated, lacks a member, or has an entry escaping its target."""


_DRIVE = re.compile(r"^[A-Za-z]:")


def unsafe_reason(info: zipfile.ZipInfo) -> str | None:
    """Why extracting ``info`` could write outside the target folder, or ``None`` if it cannot."""
    name = info.filename
    if "\x00" in name:
        return "name holds a NUL byte"
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        return "absolute path"
    parts = re.split(r"[\\/]+", name)
    if ".." in parts:
        return "'..' component"
    mode = info.external_attr >> 16
    if info.create_system == 3 and stat.S_ISLNK(mode):
        return "symbolic link"
    return None


def open_zip(path: str | os.PathLike) -> zipfile.ZipFile:
    """Open a zip and check every entry; raise :class:`ArchiveError` naming the file and entry."""
    path = Path(path)
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise ArchiveError(f"{path}: archive does not exist") from None
    except (zipfile.BadZipFile, OSError) as e:
        raise ArchiveError(f"{path}: not a readable zip archive (truncated or corrupt download?): {e}") from None
    for info in zf.infolist():
        reason = unsafe_reason(info)
        if reason:
            zf.close()
            raise ArchiveError(f"{path}: refusing archive, entry {info.filename!r} would escape the target ({reason})")
    return zf


def check_zip(path: str | os.PathLike) -> None:
    """Raise :class:`ArchiveError` if ``path`` is not a complete, safe zip (the download validator)."""
    open_zip(path).close()


def verify_zip(path: str | os.PathLike) -> None:
    """:func:`check_zip`, then read every member to its end so that zipfile checks its CRC-32.

    The check for archives without a known sha256: a corrupted byte anywhere in a member's data is
    an :class:`ArchiveError` naming the member, before the archive is published or trusted.
    """
    with open_zip(path) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            try:
                with zf.open(info) as member:
                    while member.read(1 << 20):
                        pass
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError) as e:
                raise ArchiveError(f"{path}: member {info.filename!r} is corrupt ({e})") from None


def member_parts(name: str) -> tuple[str, ...]:
    """The path components of a member name (``a/b/c.png`` -> ``('a', 'b', 'c.png')``)."""
    return PurePosixPath(name.replace("\\", "/")).parts


def find_member(zf: zipfile.ZipFile, basename: str) -> zipfile.ZipInfo:
    """The single file member whose last component is ``basename`` (archives may nest it in a folder)."""
    hits = [i for i in zf.infolist() if not i.is_dir() and member_parts(i.filename)[-1:] == (basename,)]
    if not hits:
        raise ArchiveError(f"{zf.filename}: no member named {basename!r}")
    if len(hits) > 1:
        raise ArchiveError(f"{zf.filename}: several members named {basename!r}: {[h.filename for h in hits[:5]]}")
    return hits[0]


def iter_members(zf: zipfile.ZipFile, select: Callable[[str], bool]) -> Iterator[tuple[zipfile.ZipInfo, bytes]]:
    """Yield ``(info, bytes)`` of each file member whose name ``select`` accepts, in archive order."""
    for info in zf.infolist():
        if info.is_dir() or not select(info.filename):
            continue
        try:
            data = zf.read(info)
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise ArchiveError(f"{zf.filename}: member {info.filename!r} is unreadable: {e}") from None
        yield info, data


def open_text_member(
    zf: zipfile.ZipFile, basename: str, encoding: str = "utf-8", errors: str = "strict"
) -> io.TextIOWrapper:
    """A text stream over one member, read line by line (never the whole file in memory)."""
    info = find_member(zf, basename)
    return io.TextIOWrapper(zf.open(info), encoding=encoding, errors=errors, newline="")


def extract_zip(
    path: str | os.PathLike, target: str | os.PathLike, select: Callable[[str], bool] | None = None
) -> list[Path]:
    """Extract the file members ``select`` accepts (all if ``None``) under ``target``.

    The whole archive is checked first (:func:`open_zip`), so an unsafe entry anywhere writes
    nothing; each member is written under a temporary name and renamed when complete.
    """
    target = Path(target)
    written: list[Path] = []
    with open_zip(path) as zf:
        root = target.resolve()
        chosen = [i for i in zf.infolist() if not i.is_dir() and (select is None or select(i.filename))]
        for info in chosen:
            dest = (root / Path(*member_parts(info.filename))).resolve()
            if root != dest and root not in dest.parents:
                raise ArchiveError(f"{path}: refusing entry {info.filename!r}: resolves outside {target}")
        for info in chosen:
            dest = root / Path(*member_parts(info.filename))
            with atomic_path(dest) as tmp, zf.open(info) as src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            written.append(dest)
    return written
