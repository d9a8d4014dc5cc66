"""Reading, splitting and packing text."""

from __future__ import annotations

import hashlib
import tracemalloc

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from octlm.data import text as data
from octlm.data import tokens as token_files
from octlm.data.reading import read_documents
from octlm.errors import DataError


@given(
    n_tokens=st.integers(64, 5000),
    context_length=st.integers(2, 32),
    batch_size=st.integers(1, 9),
    seed=st.integers(0, 100),
    step=st.integers(0, 500),
)
def test_packing_yields_only_full_blocks(n_tokens, context_length, batch_size, seed, step):
    if n_tokens < 2 * context_length:
        return
    tokens = np.arange(n_tokens, dtype=np.uint32)
    sampler = token_files.BlockSampler(n_tokens, context_length, batch_size, seed)
    blocks = token_files.gather_blocks(tokens, sampler.starts(step), context_length)
    assert blocks.shape == (batch_size, context_length + 1)
    # consecutive ids: a full, unbroken run of T + 1 stream positions in every row
    assert (np.diff(blocks, axis=1) == 1).all()
    assert blocks.max() < n_tokens


@given(n_tokens=st.integers(64, 3000), context_length=st.integers(2, 32), seed=st.integers(0, 50))
def test_an_epoch_visits_each_block_once(n_tokens, context_length, seed):
    if n_tokens < 2 * context_length:
        return
    sampler = token_files.BlockSampler(n_tokens, context_length, 1, seed)
    first_epoch = sampler._epoch(0)
    steps = [sampler.starts(i)[0] for i in range(len(first_epoch))]
    assert sorted(steps) == sorted(first_epoch.tolist())
    phase = first_epoch.min() % context_length
    assert sorted(first_epoch.tolist()) == list(range(phase, phase + context_length * len(first_epoch), context_length))
    assert first_epoch.max() + context_length + 1 <= n_tokens


def test_batches_depend_on_step_and_seed_only():
    a = token_files.BlockSampler(10_000, 16, 4, seed=3)
    b = token_files.BlockSampler(10_000, 16, 4, seed=3)
    later = [b.starts(s) for s in (900, 5, 300)]
    assert all((a.starts(s) == got).all() for s, got in zip((900, 5, 300), later, strict=True))
    assert not (token_files.BlockSampler(10_000, 16, 4, seed=4).starts(0) == a.starts(0)).all()


def test_ranks_split_the_global_batch():
    whole = token_files.BlockSampler(10_000, 16, 8, seed=1)
    halves = [token_files.BlockSampler(10_000, 16, 4, seed=1, rank=r, world_size=2) for r in (0, 1)]
    for step in (0, 7, 100):
        assert whole.starts(step).tolist() == halves[0].starts(step).tolist() + halves[1].starts(step).tolist()


def test_validation_blocks_cover_every_target_once():
    starts = token_files.block_starts(1000, 10)
    targets = np.concatenate([np.arange(s + 1, s + 11) for s in starts])
    assert len(set(targets)) == len(targets) and targets.min() == 1 and 1000 - 1 - targets.max() < 10


def test_split_takes_the_end_of_each_file():
    docs = [data.Document("a", "0123456789", 10, ""), data.Document("b", "abcdefghijklmnopqrst", 20, "")]
    train, val = data.split_documents(docs, 0.1)
    assert train == ["012345678", "abcdefghijklmnopqr"] and val == ["9", "st"]
    with pytest.raises(DataError, match="val-fraction"):
        data.split_documents(docs, 0.0)


def test_default_corpus_is_stdlib_without_tests():
    files = data.default_corpus_files()
    root = data.default_corpus_root()
    rel = [f.relative_to(root).as_posix() for f in files]
    assert rel == sorted(rel) and len(rel) > 100
    assert any(r == "os.py" for r in rel)
    assert not any(part in ("test", "tests", "site-packages") for r in rel for part in r.split("/")[:-1])


def test_read_documents_records_bytes_and_sha(tmp_path):
    (tmp_path / "a.txt").write_bytes("héllo\r\nworld\n".encode())
    (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbfbom first\n")
    docs, info = read_documents([tmp_path])
    assert [d.path for d in docs] == [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    assert docs[0].text == "héllo\r\nworld\n"  # line endings kept
    assert docs[1].text == "bom first\n"  # the byte-order mark is not text
    assert docs[0].sha256 == hashlib.sha256("héllo\r\nworld\n".encode()).hexdigest()
    assert docs[0].n_bytes == len("héllo\r\nworld\n".encode())


def test_undecodable_text_names_file_and_offset(tmp_path):
    bad = tmp_path / "latin.txt"
    bad.write_bytes(b"abc caf" + b"\xe9 ok")
    with pytest.raises(DataError) as err:
        read_documents([bad])
    assert str(bad) in str(err.value) and "byte offset 7" in str(err.value) and "--encoding cp1252" in str(err.value)
    docs, _ = read_documents([bad], encoding="cp1252")
    assert docs[0].text == "abc café ok"


@pytest.mark.parametrize("content,match", [(b"", "empty"), (b"  \n", "empty"), (b"\x00\x01\x02binary", "binary")])
def test_named_unusable_file_is_an_error(tmp_path, content, match):
    path = tmp_path / "x.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=match):
        read_documents([path])


def test_folder_skips_binary_and_empty_but_needs_text(tmp_path):
    (tmp_path / "img.bin").write_bytes(b"\x89PNG\x00\x00")
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DataError, match="no text files"):
        read_documents([tmp_path])
    (tmp_path / "t.txt").write_text("text")
    docs, info = read_documents([tmp_path])
    assert [d.text for d in docs] == ["text"] and len(info["skipped"]) == 2


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_a_huge_binary_file_is_recognised_from_its_head_not_read_whole(tmp_path, encoding):
    """A disk image beside the text (a 4 GB one took 4.4 GB of memory and 14 s) is skipped from its first 8 KiB.

    The image is sparse (``truncate``: no disk space); reading it whole would
    allocate its 256 MiB, which Python's allocation tracer would see.
    """
    (tmp_path / "notes.txt").write_text("some text", encoding=encoding)
    image = tmp_path / "disk.img"
    with image.open("wb") as handle:
        handle.truncate(256 * 2**20)
    tracemalloc.start()
    try:
        docs, info = read_documents([tmp_path], encoding=encoding)
        with pytest.raises(DataError, match="binary"):
            read_documents([image], encoding=encoding)  # named: an error, from the same head
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [d.text for d in docs] == ["some text"]
    assert info["skipped"] == [{"path": str(image), "reason": "binary"}]
    assert peak < 8 * 2**20


def test_missing_path(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_documents([tmp_path / "nope.txt"])


def test_token_files_round_trip(tmp_path):
    ids = np.array([0, 5, 65535], dtype=np.uint16)
    entry = token_files.write_tokens(tmp_path / "t.bin", ids)
    assert entry["sha256"] == hashlib.sha256((tmp_path / "t.bin").read_bytes()).hexdigest()
    assert token_files.open_tokens(tmp_path / "t.bin", entry["dtype"]).tolist() == [0, 5, 65535]
    assert token_files.token_dtype(70000) == np.uint32 and token_files.token_dtype(1024) == np.uint16


def test_short_training_text_is_refused():
    with pytest.raises(DataError, match="context_length=128"):
        token_files.BlockSampler(200, 128, 4, 0)


@given(
    st.text(alphabet=st.sampled_from(" \n"), max_size=3),
    st.text(alphabet=st.sampled_from("ab \t\x00\x1b\x7fé"), max_size=40),
    st.text(max_size=20),
    st.integers(4, 12),
)
@example("", "abcde", "", 5)  # exactly the width: shown whole
@example("", "abcdef", "", 5)  # one past it: cut
@example("", "ab\x00", "", 5)  # escaping makes it one past
def test_the_first_line_is_the_escaped_line_cut_to_its_width(blank, line, rest, width):
    """Against the plain rule (escape the whole first non-blank line, then cut it): escaping only the head of a long
    line gives the same text."""
    from octlm.data.text import first_line
    from octlm.data.token_display import printable_text

    text = blank + line + "\n" + rest
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    whole = printable_text(line.replace("\t", " "))
    assert first_line(text, width) == (whole if len(whole) <= width else whole[: width - 3] + "...")
