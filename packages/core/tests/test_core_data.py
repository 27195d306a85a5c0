import hashlib

import pytest

from iclr25.core.data import ChecksumError, DataNotFoundError, DatasetSpec, RemoteFile, resolve, sha256sum


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    root = tmp_path / "mirror"
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "a.txt").write_bytes(b"hello\n")
    monkeypatch.setenv("ICLR25_DATA", str(root))
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ICLR25_DOWNLOAD", raising=False)
    return root


def test_sha256_matches_hashlib(mirror):
    p = mirror / "toy" / "a.txt"
    assert sha256sum(p) == hashlib.sha256(b"hello\n").hexdigest()


def test_resolve_from_mirror_with_checksum(mirror):
    good = RemoteFile("a.txt", url="https://example.org/a.txt", sha256=hashlib.sha256(b"hello\n").hexdigest())
    assert DatasetSpec("toy", (good,)).path() == mirror / "toy" / "a.txt"


def test_checksum_mismatch_is_an_error(mirror):
    bad = RemoteFile("a.txt", url="https://example.org/a.txt", sha256="0" * 64)
    with pytest.raises(ChecksumError, match="does not match"):
        resolve("toy", bad)


def test_missing_file_names_file_places_and_url(mirror, tmp_path):
    spec = RemoteFile("b.npz", url="https://example.org/b.npz", sha256=None)
    with pytest.raises(DataNotFoundError) as e:
        resolve("toy", spec)
    msg = str(e.value)
    assert "toy/b.npz" in msg and str(mirror / "toy" / "b.npz") in msg
    assert str(tmp_path / "cache" / "toy" / "b.npz") in msg and "https://example.org/b.npz" in msg


def test_cache_is_second(mirror, tmp_path):
    (tmp_path / "cache" / "toy").mkdir(parents=True)
    (tmp_path / "cache" / "toy" / "c.txt").write_text("x")
    assert resolve("toy", "c.txt") == tmp_path / "cache" / "toy" / "c.txt"


def test_download_into_cache_verifies(mirror, tmp_path):
    src = tmp_path / "remote.bin"
    src.write_bytes(b"payload")
    ok = RemoteFile("d.bin", url=src.as_uri(), sha256=hashlib.sha256(b"payload").hexdigest())
    p = resolve("toy", ok, download=True)
    assert p == tmp_path / "cache" / "toy" / "d.bin" and p.read_bytes() == b"payload"
    wrong = RemoteFile("e.bin", url=src.as_uri(), sha256="1" * 64)
    with pytest.raises(ChecksumError):
        resolve("toy", wrong, download=True)
    assert not (tmp_path / "cache" / "toy" / "e.bin").exists()
    assert not list((tmp_path / "cache" / "toy").glob("*.part"))


def test_undeclared_file():
    with pytest.raises(KeyError, match="declares no file"):
        DatasetSpec("toy", ()).file("x")
