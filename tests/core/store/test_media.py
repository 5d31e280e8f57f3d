"""Content-addressed media: atomic, idempotent, confined to its root."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from core.store import MediaStore


async def test_put_is_content_addressed(media_store: MediaStore) -> None:
    data = b"\x89PNG fake image"
    sha = hashlib.sha256(data).hexdigest()
    rel, digest = await media_store.put(data, ".PNG")
    assert digest == sha
    assert rel == f"{sha[:2]}/{sha[2:4]}/{sha}.png"
    assert media_store.path(rel) == media_store.root / rel
    assert await media_store.read(rel) == data


async def test_put_is_idempotent_and_leaves_no_temp_files(media_store: MediaStore) -> None:
    rel, _ = await media_store.put(b"same", "txt")
    target = media_store.path(rel)
    mtime = target.stat().st_mtime_ns
    again, _ = await media_store.put(b"same", "txt")
    assert again == rel
    assert target.stat().st_mtime_ns == mtime  # not rewritten
    assert [p.name for p in target.parent.iterdir()] == [target.name]


async def test_different_bytes_different_paths(media_store: MediaStore) -> None:
    a, _ = await media_store.put(b"a", "bin")
    b, _ = await media_store.put(b"b", "bin")
    assert a != b


async def test_odd_extensions_are_cleaned(media_store: MediaStore) -> None:
    rel, sha = await media_store.put(b"x", "../../sh")
    assert rel.endswith(f"{sha}.sh")
    rel, sha = await media_store.put(b"y", "")
    assert rel.endswith(f"{sha}.bin")


@pytest.mark.parametrize(
    "bad", ["../outside.txt", "ab/../../outside.txt", "/etc/passwd", "", ".", "ab/cd/../../.."]
)
async def test_read_refuses_paths_outside_the_root(
    media_store: MediaStore, tmp_path: Path, bad: str
) -> None:
    (tmp_path / "outside.txt").write_text("secret")
    with pytest.raises(ValueError):
        await media_store.read(bad)


async def test_read_refuses_a_symlink_out_of_the_root(
    media_store: MediaStore, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("secret")
    media_store.root.mkdir(parents=True, exist_ok=True)
    (media_store.root / "link.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ValueError):
        await media_store.read("link.txt")


def test_relative_refuses_outside(media_store: MediaStore, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        media_store.relative(tmp_path / "elsewhere.png")
    assert media_store.relative(media_store.root / "ab" / "x.png") == "ab/x.png"


async def test_relative_of_a_stored_file_and_of_look_alikes(
    media_store: MediaStore, tmp_path: Path
) -> None:
    """A stored file's path gives its storage path back; a path that only
    looks like one (climbing out, or the store's layout under another root)
    is refused as before."""
    rel, _ = await media_store.put(b"stored", "png")
    assert media_store.relative(media_store.path(rel)) == rel
    assert media_store.relative(media_store.root / rel) == rel
    escape = media_store.root / rel.split("/")[0] / ".." / ".." / "elsewhere.png"
    with pytest.raises(ValueError):
        media_store.relative(escape)
    with pytest.raises(ValueError):
        media_store.relative(tmp_path / "other-root" / rel)


async def test_path_of_a_stored_name_and_of_look_alikes(
    media_store: MediaStore, tmp_path: Path
) -> None:
    """A name in the store's own layout is joined to the root without asking
    the file system, to the same path resolving gives; a name that only
    starts like one (climbing out after it) is still resolved and refused."""
    rel, _ = await media_store.put(b"stored", "png")
    assert media_store.path(rel) == (media_store.root / rel).resolve()
    assert media_store.path(rel).read_bytes() == b"stored"
    (tmp_path / "outside.txt").write_text("secret")
    for bad in (f"{rel}/../../../../outside.txt", f"../{rel}", f"/{rel}"):
        with pytest.raises(ValueError):
            media_store.path(bad)
