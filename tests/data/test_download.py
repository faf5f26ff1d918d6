"""Downloads through the real code path from a local server: resume, retries, checksums, zips."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import zipfile
from pathlib import Path

import pytest

from fixtures_leaf import ArchiveServer, etag_of, make_glove_zip, run_data_cli
from upfl.data.archive import ArchiveError, extract_zip, open_zip
from upfl.data.download import (
    CACHE_DIR,
    DownloadError,
    copy_archive,
    download,
    fetch_source,
    read_recorded_sha256,
    sidecar,
    state_file,
    verify_file,
)
from upfl.data.sources import SOURCES, resolve_sources


def _payload(n: int = 300_000, salt: int = 0) -> bytes:
    return bytes((i * 7919 + salt) % 251 for i in range(n))


def _looks_complete(folder: Path) -> list[str]:
    """Names in ``folder`` (not in the download cache) that could pass for a finished archive."""
    return sorted(p.name for p in folder.iterdir() if p.name != CACHE_DIR)


def test_download_records_checksum_and_reuses(tmp_path):
    data = _payload()
    with ArchiveServer({"/a.bin": data}) as srv:
        dest = download(srv.url("/a.bin"), tmp_path / "res" / "a.bin", progress=False, backoff=0)
        assert dest.read_bytes() == data
        assert read_recorded_sha256(dest) == hashlib.sha256(data).hexdigest()
        n = len(srv.log.requests)
        download(srv.url("/a.bin"), dest, progress=False)
        assert len(srv.log.requests) == n, "a verified file is not downloaded again"
    assert not (tmp_path / "res" / CACHE_DIR / "a.bin.part").exists()


def test_interrupted_download_resumes_with_range(tmp_path):
    data = _payload()
    with ArchiveServer({"/a.bin": data}) as srv:
        srv.drop_once["/a.bin"] = len(data) // 2
        dest = download(
            srv.url("/a.bin"), tmp_path / "a.bin", progress=False, backoff=0, sha256=hashlib.sha256(data).hexdigest()
        )
        ranges = [r for _, r in srv.log.requests]
    assert dest.read_bytes() == data
    assert ranges[0] is None and ranges[1] == f"bytes={len(data) // 2}-"


def test_resume_across_calls_from_part_file(tmp_path):
    data = _payload()
    cache = tmp_path / "cache"
    with ArchiveServer({"/a.bin": data}) as srv:
        srv.truncate["/a.bin"] = 100_000
        with pytest.raises(DownloadError, match="incomplete.*run again to resume"):
            download(
                srv.url("/a.bin"), tmp_path / "res" / "a.bin", cache_dir=cache, retries=1, backoff=0, progress=False
            )
        assert (cache / "a.bin.part").stat().st_size == 100_000
        del srv.truncate["/a.bin"]
        download(srv.url("/a.bin"), tmp_path / "res" / "a.bin", cache_dir=cache, progress=False)
        assert srv.log.requests[-1][1] == "bytes=100000-"
    assert (tmp_path / "res" / "a.bin").read_bytes() == data


def test_truncated_transfer_is_named_error_and_nothing_complete(tmp_path):
    data = _payload()
    res = tmp_path / "res"
    with ArchiveServer({"/a.zip": data}) as srv:
        srv.truncate["/a.zip"] = 5000
        with pytest.raises(DownloadError) as err:
            download(srv.url("/a.zip"), res / "a.zip", retries=2, backoff=0, progress=False)
    assert srv.url("/a.zip") in str(err.value) and "5000 bytes" in str(err.value)
    assert _looks_complete(res) == []


def test_truncated_archive_fails_zip_validation(tmp_path):
    zpath = make_glove_zip(tmp_path / "src", dim=5)
    cut = zpath.read_bytes()[:-200]
    res = tmp_path / "res"
    with ArchiveServer({"/glove.6B.zip": cut}) as srv:
        src = resolve_sources(["glove"], urls={"glove": srv.url("/glove.6B.zip")})[0]
        with pytest.raises(DownloadError, match="failed validation.*not a readable zip"):
            fetch_source(src, res, progress=False, backoff=0)
    assert _looks_complete(res) == []
    assert (res / CACHE_DIR / "glove.6B.zip.bad").exists()


def test_wrong_checksum_is_named_error_and_nothing_complete(tmp_path):
    data = _payload(5000)
    res = tmp_path / "res"
    wrong = "0" * 64
    with ArchiveServer({"/a.bin": data}) as srv, pytest.raises(DownloadError) as err:
        download(srv.url("/a.bin"), res / "a.bin", sha256=wrong, progress=False)
    msg = str(err.value)
    assert "sha256 mismatch" in msg and wrong in msg and hashlib.sha256(data).hexdigest() in msg
    assert _looks_complete(res) == []


def test_recorded_checksum_checked_on_later_use(tmp_path):
    dest = tmp_path / "a.bin"
    dest.write_bytes(b"original")
    verify_file(dest)
    assert sidecar(dest).exists()
    dest.write_bytes(b"tampered")
    with pytest.raises(DownloadError, match=r"a.bin: sha256 mismatch \(checksum recorded"):
        verify_file(dest)


def test_retries_server_errors_then_gives_up(tmp_path):
    with ArchiveServer({}) as srv:
        with pytest.raises(DownloadError, match="HTTP 404"):
            download(srv.url("/missing.zip"), tmp_path / "m.zip", retries=3, backoff=0, progress=False)
        assert len(srv.log.requests) == 1, "a 404 is not retried"


def test_from_archive_and_placed_archive(tmp_path):
    zpath = make_glove_zip(tmp_path / "elsewhere", dim=5)
    res = tmp_path / "res"
    src = SOURCES["glove"]
    placed = fetch_source(src, res, from_archive=zpath)
    assert placed.read_bytes() == zpath.read_bytes() and sidecar(placed).exists()
    again = fetch_source(src, res)
    assert again == placed
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        copy_archive(zpath, tmp_path / "other.zip", sha256="f" * 64)


def test_resolve_sources_overrides_and_errors():
    srcs = resolve_sources(["femnist", "glove"], urls={"glove": "http://mirror/g.zip"})
    assert [s.name for s in srcs] == ["by_class", "paper_femnist_train_groups", "paper_femnist_test_groups", "glove"]
    assert srcs[-1].url == "http://mirror/g.zip"
    with pytest.raises(KeyError, match="unknown data set or source 'mnist'"):
        resolve_sources(["mnist"])


def _zip_with(path: Path, entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for info, data in entries:
            zf.writestr(info, data)
    return path


@pytest.mark.parametrize("bad_name", ["../evil.txt", "ok/../../evil.txt", "/abs/evil.txt", "C:/evil.txt"])
def test_escaping_entry_refused_before_writing(tmp_path, bad_name):
    archive = _zip_with(tmp_path / "bad.zip", [("good/first.txt", b"x"), (bad_name, b"evil")])
    target = tmp_path / "out" / "target"
    with pytest.raises(ArchiveError, match="refusing archive.*escape"):
        extract_zip(archive, target)
    assert not target.exists() or list(target.rglob("*")) == []
    assert not (tmp_path / "out" / "evil.txt").exists() and not (tmp_path / "evil.txt").exists()


def test_symlink_entry_refused(tmp_path):
    link = zipfile.ZipInfo("data/link")
    link.create_system = 3
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    archive = _zip_with(tmp_path / "link.zip", [(link, b"/etc/passwd")])
    with pytest.raises(ArchiveError, match="symbolic link"):
        open_zip(archive)


def test_extract_only_selected_members(tmp_path):
    zpath = make_glove_zip(tmp_path, dim=5)
    written = extract_zip(zpath, tmp_path / "x", select=lambda n: n.endswith("300d.txt"))
    assert [p.name for p in written] == ["glove.6B.300d.txt"]
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["glove.6B.300d.txt"]
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "x").iterdir())
    assert os.path.getsize(written[0]) > 0


def test_cli_fetch_download_and_offline(tmp_path, capsys):
    from fixtures_leaf import make_sent140_zip, run_data_cli

    folder = tmp_path / "src"
    make_sent140_zip(folder, users=5)
    glove = make_glove_zip(folder, dim=5)
    res = tmp_path / "res"
    with ArchiveServer({"/s.zip": (folder / "trainingandtestdata.zip").read_bytes()}) as srv:
        rc = run_data_cli(
            [
                "data",
                "fetch",
                "sent140",
                "--resources",
                str(res),
                "--no-progress",
                "--url",
                f"sent140={srv.url('/s.zip')}",
                "--url",
                "glove=http://127.0.0.1:9/none",
                "--from-archive",
                str(glove),
            ]
        )
    assert rc == 0
    assert sorted(p.name for p in res.iterdir() if p.is_file()) == [
        "glove.6B.zip",
        "glove.6B.zip.sha256",
        "trainingandtestdata.zip",
        "trainingandtestdata.zip.sha256",
    ]
    (res / "glove.6B.zip").write_bytes(b"not the recorded archive")
    assert run_data_cli(["data", "fetch", "glove", "--resources", str(res), "--no-progress"]) == 1
    assert "glove.6B.zip" in capsys.readouterr().err
    assert run_data_cli(["data", "fetch", "mnist", "--resources", str(res)]) == 2  # bad input
    assert "unknown data set or source 'mnist'" in capsys.readouterr().err


def test_cli_extract_refuses_escape(tmp_path, capsys):
    from fixtures_leaf import run_data_cli

    archive = _zip_with(tmp_path / "bad.zip", [("a.txt", b"x"), ("../../evil.txt", b"evil")])
    assert run_data_cli(["data", "extract", str(archive), str(tmp_path / "t")]) == 1
    assert "refusing archive" in capsys.readouterr().err and not (tmp_path / "t").exists()
    zpath = make_glove_zip(tmp_path, dim=5)
    assert run_data_cli(["data", "extract", str(zpath), str(tmp_path / "g"), "--member", "glove.6B.300d.txt"]) == 0
    assert [p.name for p in (tmp_path / "g").iterdir()] == ["glove.6B.300d.txt"]


def test_negative_retries_is_a_named_error(tmp_path, capsys):
    res = tmp_path / "res"
    rc = run_data_cli(["data", "fetch", "glove", "--resources", str(res), "--retries", "-1", "--no-progress"])
    assert rc == 2 and "--retries: must be >= 0" in capsys.readouterr().err
    assert not res.exists()
    with pytest.raises(DownloadError, match="retries must be an integer >= 0"):
        download("http://127.0.0.1:9/x", tmp_path / "x", retries=-1)


def _half_downloaded(srv: ArchiveServer, dest: Path, cache: Path, cut: int = 100_000) -> Path:
    srv.truncate["/a.bin"] = cut
    with pytest.raises(DownloadError, match="run again to resume"):
        download(srv.url("/a.bin"), dest, cache_dir=cache, retries=0, backoff=0, progress=False)
    del srv.truncate["/a.bin"]
    part = cache / "a.bin.part"
    assert part.stat().st_size == cut and state_file(part).exists()
    return part


def test_corrupted_part_is_not_spliced(tmp_path, capsys):
    data = _payload()
    dest, cache = tmp_path / "res" / "a.bin", tmp_path / "cache"
    with ArchiveServer({"/a.bin": data}) as srv:
        part = _half_downloaded(srv, dest, cache)
        raw = bytearray(part.read_bytes())
        raw[500] ^= 0xFF
        part.write_bytes(bytes(raw))
        download(srv.url("/a.bin"), dest, cache_dir=cache, progress=False, backoff=0)
        assert srv.log.requests[-1][1] is None, "the corrupted .part is discarded, the download restarts"
    assert dest.read_bytes() == data
    assert "corrupted" in capsys.readouterr().err


def test_resume_confirms_the_object_with_if_range(tmp_path):
    data = _payload()
    dest, cache = tmp_path / "a.bin", tmp_path / "cache"
    with ArchiveServer({"/a.bin": data}) as srv:
        _half_downloaded(srv, dest, cache)
        download(srv.url("/a.bin"), dest, cache_dir=cache, progress=False, backoff=0)
        assert srv.log.requests[-1][1] == "bytes=100000-" and srv.log.if_range[-1] == etag_of(data)
    assert dest.read_bytes() == data


@pytest.mark.parametrize("if_range", ["honour", "ignore"])
def test_changed_object_restarts_whether_server_honours_if_range_or_not(tmp_path, if_range):
    old, new = _payload(), _payload(salt=7)
    dest, cache = tmp_path / "a.bin", tmp_path / "cache"
    with ArchiveServer({"/a.bin": old}) as srv:
        srv.if_range = if_range
        _half_downloaded(srv, dest, cache)
        srv.files["/a.bin"] = new  # the upstream file was replaced between the two attempts
        download(srv.url("/a.bin"), dest, cache_dir=cache, progress=False, backoff=0)
    assert dest.read_bytes() == new, "never old bytes spliced onto new ones"


def test_server_without_validators_is_not_resumed(tmp_path, capsys):
    data = _payload()
    dest, cache = tmp_path / "a.bin", tmp_path / "cache"
    with ArchiveServer({"/a.bin": data}) as srv:
        srv.validators = False
        _half_downloaded(srv, dest, cache)
        download(srv.url("/a.bin"), dest, cache_dir=cache, progress=False, backoff=0)
        assert srv.log.requests[-1][1] is None
    assert dest.read_bytes() == data
    assert "no ETag or Last-Modified" in capsys.readouterr().err


def _corrupt_member(zpath: Path, member: str) -> bytes:
    """The zip's bytes with one byte of ``member``'s data flipped (central directory intact)."""
    raw = bytearray(zpath.read_bytes())
    with zipfile.ZipFile(zpath) as zf:
        info = zf.getinfo(member)
    offset = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + 10
    raw[offset] ^= 0xFF
    return bytes(raw)


def test_corrupted_member_fails_crc_check_before_first_use(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    zpath = folder / "glove.6B.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("glove.6B.300d.txt", "good " + " ".join(["0.5"] * 300) + "\n" * 50)
    bad = _corrupt_member(zpath, "glove.6B.300d.txt")
    res = tmp_path / "res"
    with ArchiveServer({"/glove.6B.zip": bad}) as srv:
        src = resolve_sources(["glove"], urls={"glove": srv.url("/glove.6B.zip")})[0]
        assert src.sha256 is None
        with pytest.raises(DownloadError, match="member 'glove.6B.300d.txt' is corrupt"):
            fetch_source(src, res, progress=False, backoff=0)
    assert sorted(p.name for p in res.iterdir() if p.name != CACHE_DIR) == []
    assert (res / CACHE_DIR / "glove.6B.zip.bad").exists()
    placed = res / "glove.6B.zip"
    placed.write_bytes(bad)  # an archive put in the resources folder by hand is checked the same way
    with pytest.raises(DownloadError, match="is corrupt"):
        fetch_source(SOURCES["glove"], res)
    assert not (res / "glove.6B.zip.sha256").exists(), "nothing recorded as the reference"


def test_concurrent_fetches_take_turns(tmp_path):
    zpath = make_glove_zip(tmp_path / "src", dim=5)
    res = tmp_path / "res"
    results, errors = [], []
    with ArchiveServer({"/glove.6B.zip": zpath.read_bytes()}) as srv:
        srv.delay = 0.3
        src = resolve_sources(["glove"], urls={"glove": srv.url("/glove.6B.zip")})[0]

        def fetch():
            try:
                results.append(fetch_source(src, res, progress=False, backoff=0))
            except Exception as e:  # noqa: BLE001 - the test reports any failure of either fetch
                errors.append(e)

        threads = [threading.Thread(target=fetch) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors and len(results) == 2
        assert len(srv.log.requests) == 1, "the second fetch waited and found the archive published"
    assert (res / "glove.6B.zip").read_bytes() == zpath.read_bytes()


def test_sources_use_https_and_ship_the_published_sent140_checksum():
    assert all(s.url.startswith("https://") for s in SOURCES.values())
    assert SOURCES["sent140"].sha256 == "004a3772c8a7ff9bbfeb875880f47f0679d93fc63e5cf9cff72d54a8a6162e57"
    mirrored = resolve_sources(["sent140"], urls={"sent140": "http://127.0.0.1:9/t.zip"})[0]
    assert mirrored.sha256 is None, "a mirror is checked by the checksum given with it"
    assert resolve_sources(["sent140"])[0].sha256 == SOURCES["sent140"].sha256


def test_a_full_disk_is_named_and_publishes_nothing(tmp_path, monkeypatch):
    """The disk fills after 100,000 bytes: the error names the .part file and the cause; no archive appears."""
    import errno
    import io

    from upfl.data import download as download_module

    class FillingFile(io.FileIO):
        def write(self, block):
            if self.tell() + len(block) > 100_000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().write(block)

    def filling_open(path, mode="r", *args, **kwargs):
        return (
            FillingFile(path, mode.replace("b", ""))
            if "b" in mode and ("w" in mode or "a" in mode)
            else open(path, mode, *args, **kwargs)
        )

    monkeypatch.setattr(download_module, "open", filling_open, raising=False)
    dest = tmp_path / "a.bin"
    message = r"a\.bin\.part: cannot write the download \(No space left on device\); nothing published"
    with ArchiveServer({"/a.bin": _payload()}) as srv, pytest.raises(DownloadError, match=message):
        download(srv.url("/a.bin"), dest, cache_dir=tmp_path / "cache", retries=0, backoff=0, progress=False)
    assert not dest.exists()
