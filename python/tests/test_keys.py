"""Encrypted checkpoints: written with a key, read with a keyring, a fetch callback, or refused without the key."""
from __future__ import annotations

from pathlib import Path

import pytest

import halite
from conftest import make_memory

MEMORY = bytes(make_memory(40, seed=11))


@pytest.fixture(params=["aes-256-gcm", "xchacha20-poly1305"])
def encrypted(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, bytes, str]:
    key = halite.generate_key()
    path = tmp_path / "secret.hlt"
    with halite.Writer(path, encryption_key=key, cipher=request.param) as w:
        w.put_pages(w.add_region("ram", 0, len(MEMORY)), 0, MEMORY)
        w.add_blob("cfg", b"secret configuration")
    return path, key, request.param


def test_read_with_keyring(encrypted: tuple[Path, bytes, str]) -> None:
    path, key, cipher = encrypted
    with halite.Keyring() as keyring:
        assert keyring.add_key(key) == halite.key_id(key)
        with halite.Checkpoint(path, keyring=keyring) as ckpt:
            assert ckpt.encryption == halite.Encryption(cipher, halite.key_id(key))
            assert ckpt.read_pages(0) == MEMORY
            assert ckpt.read_blob("cfg") == b"secret configuration"
            ckpt.verify()
    assert MEMORY[:4096] not in path.read_bytes()


def test_without_the_key_names_its_id(encrypted: tuple[Path, bytes, str], monkeypatch: pytest.MonkeyPatch) -> None:
    path, key, _ = encrypted
    monkeypatch.delenv("HALITE_ENCRYPT_KEY", raising=False)
    monkeypatch.delenv("HALITE_KEYRING", raising=False)
    with pytest.raises(halite.AuthenticationError) as e:
        halite.Checkpoint(path)
    assert halite.key_id(key).hex() in str(e.value)
    with halite.Keyring() as wrong:
        wrong.add_key(halite.generate_key())
        with pytest.raises(halite.AuthenticationError):
            halite.Checkpoint(path, keyring=wrong)


def test_without_key(encrypted: tuple[Path, bytes, str], monkeypatch: pytest.MonkeyPatch) -> None:
    path, key, _ = encrypted
    monkeypatch.delenv("HALITE_ENCRYPT_KEY", raising=False)
    with halite.Checkpoint(path, without_key=True) as ckpt:
        info = ckpt.info()
        assert info.sealed and info.encrypted and info.stored_pages == 0
        assert ckpt.verify().blocks == info.blocks  # every payload's checksum, no key needed
        with pytest.raises(halite.HaliteError):
            ckpt.read_page(0, 0)


def test_key_file(encrypted: tuple[Path, bytes, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, key, _ = encrypted
    monkeypatch.delenv("HALITE_ENCRYPT_KEY", raising=False)
    (tmp_path / "key").write_text(key.hex() + "\n")
    with halite.Checkpoint(path, key_files=[tmp_path / "key"]) as ckpt:
        assert ckpt.read_pages(0) == MEMORY


def test_fetch_callback(encrypted: tuple[Path, bytes, str]) -> None:
    path, key, _ = encrypted
    asked: list[bytes] = []

    def fetch(key_id: bytes) -> bytes | None:
        asked.append(key_id)
        return key if key_id == halite.key_id(key) else None

    keyring = halite.Keyring()
    keyring.set_fetch(fetch)
    with halite.Checkpoint(path, keyring=keyring) as ckpt:
        assert ckpt.read_pages(0) == MEMORY
    assert asked == [halite.key_id(key)]


def test_fetch_callback_that_refuses(encrypted: tuple[Path, bytes, str]) -> None:
    path, _, _ = encrypted
    keyring = halite.Keyring()
    keyring.set_fetch(lambda key_id: None)
    with pytest.raises(halite.AuthenticationError):
        halite.Checkpoint(path, keyring=keyring)


def test_keyring_file(encrypted: tuple[Path, bytes, str], tmp_path: Path) -> None:
    path, key, _ = encrypted
    ring = tmp_path / "keys"
    ring.write_text(f"# the test's key\n{halite.key_id(key).hex()} {key.hex()}\n")
    with halite.Keyring() as keyring:
        keyring.add_file(ring)
        with halite.Checkpoint(path, keyring=keyring) as ckpt:
            assert ckpt.read_pages(0) == MEMORY
    ring.write_text("not a keyring line\n")
    with halite.Keyring() as keyring:
        with pytest.raises(halite.HaliteError):
            keyring.add_file(ring)


def test_bad_key_length() -> None:
    with pytest.raises(halite.InvalidArgumentError):
        halite.key_id(b"short")
