"""Corpus files that hold records (JSON Lines, JSON arrays, Parquet, CSV), plain or compressed, and their bad records.

Every file here is written by the format's own library (json, csv, pyarrow,
gzip, lzma, bz2, zstandard); what octlm reads back must be exactly the texts
written, one document per record.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import json
import lzma

import numpy as np
import pytest

from octlm.data.reading import read_documents
from octlm.data.records import file_format
from octlm.errors import DataError
from tests.conftest import flags

TEXTS = ["First record.\nWith two lines.", "Zweiter Eintrag: grün, ß, 東京.", "", 'a "quoted", comma, record']

COMPRESSORS = {
    None: lambda data: data,
    "gzip": gzip.compress,
    "xz": lzma.compress,
    "bz2": bz2.compress,
    "zstd": lambda data: __import__("zstandard").ZstdCompressor().compress(data),
}
SUFFIX = {None: "", "gzip": ".gz", "xz": ".xz", "bz2": ".bz2", "zstd": ".zst"}


def _jsonl(texts) -> bytes:
    return "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts)).encode()


def _json(texts) -> bytes:
    return json.dumps([{"text": t, "n": i} for i, t in enumerate(texts)]).encode()


def _csv(texts, path) -> bytes:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "text"])
        writer.writerows([i, t] for i, t in enumerate(texts))
    return path.read_bytes()


def _parquet(texts, path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path, row_group_size=2)


def _write(tmp_path, fmt: str, compression: str | None, texts=TEXTS):
    name = f"corpus.{fmt}{SUFFIX[compression]}"
    path = tmp_path / name
    raw = {
        "jsonl": lambda: _jsonl(texts),
        "json": lambda: _json(texts),
        "csv": lambda: _csv(texts, tmp_path / "plain.csv"),
        "txt": lambda: texts[0].encode(),
    }[fmt]()
    path.write_bytes(COMPRESSORS[compression](raw))
    return path


@pytest.mark.parametrize("compression", list(COMPRESSORS))
@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_every_format_and_compression_gives_one_document_per_record(tmp_path, fmt, compression):
    path = _write(tmp_path, fmt, compression)
    docs, info = read_documents([path])
    assert [d.text for d in docs] == TEXTS
    (entry,) = info["files"]
    assert entry["format"] == fmt and entry["records"] == len(TEXTS) and entry.get("compression") == compression
    assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and entry["bytes"] == path.stat().st_size


def test_parquet_is_read_by_batches_in_row_order(tmp_path):
    path = tmp_path / "corpus.parquet"
    _parquet(TEXTS * 3, path)
    docs, info = read_documents([path])
    assert [d.text for d in docs] == TEXTS * 3
    assert info["files"][0]["format"] == "parquet" and info["files"][0]["records"] == 12


@pytest.mark.parametrize("compression", [c for c in COMPRESSORS if c])
def test_compressed_plain_text_is_one_document(tmp_path, compression):
    path = _write(tmp_path, "txt", compression)
    (doc,), info = read_documents([path])
    assert (
        doc.text == TEXTS[0] and info["files"][0]["format"] == "text" and info["files"][0]["compression"] == compression
    )


def test_a_mixed_folder_lists_each_file_with_its_format(tmp_path):
    (tmp_path / "notes.txt").write_text("plain notes", encoding="utf-8")
    _write(tmp_path, "jsonl", "gzip")
    _write(tmp_path, "csv", None)
    _parquet(["p0", "p1"], tmp_path / "more.parquet")
    (tmp_path / "plain.csv").unlink()  # the helper's uncompressed copy
    docs, info = read_documents([tmp_path])
    formats = {e["path"].rsplit("/", 1)[-1]: (e["format"], e["records"]) for e in info["files"]}
    assert formats == {
        "corpus.csv": ("csv", 4),
        "corpus.jsonl.gz": ("jsonl", 4),
        "more.parquet": ("parquet", 2),
        "notes.txt": ("text", 1),
    }
    assert len(docs) == 11


def test_text_field_names_another_field(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"content": "one"}\n{"content": "two"}\n', encoding="utf-8")
    docs, _ = read_documents([path], text_field="content")
    assert [d.text for d in docs] == ["one", "two"]


@pytest.mark.parametrize(
    "line, says",
    [
        ('{"text": "ok"', "line 2 is not JSON"),
        ('{"body": "x"}', "line 2: no field 'text' (its fields: body); name the text field with --text-field NAME"),
        ('{"text": 5}', "line 2: field 'text' is a number, not a string"),
        ('{"text": null}', "line 2: field 'text' is null, not a string"),
        ('["text"]', "line 2: the record is an array, not an object"),
    ],
)
def test_a_bad_jsonl_record_names_file_line_and_fix_or_is_counted(tmp_path, line, says):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "good one"}\n' + line + '\n{"text": "good two"}\n', encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_documents([path])
    assert str(err.value).startswith(f"{path}: {says}") and "--skip-bad-records" in str(err.value)
    docs, info = read_documents([path], skip_bad_records=True)
    assert [d.text for d in docs] == ["good one", "good two"]
    assert info["bad_records"]["count"] == 1 and says in info["bad_records"]["first"][0]
    assert info["files"][0]["bad_records"] == 1 and info["files"][0]["records"] == 2


#: Record files cut short (a copy or download stopped mid-record), as written: (name, content, what the error says).
CUT_SHORT = [
    ("cut.jsonl", '{"text": "one"}\n{"text": "tw', "line 2 is not JSON (Unterminated string starting at column 10)"),
    ("cut.json", '[{"text": "one"}, {"text": "tw', "not JSON (Unterminated string starting at line 1, column 28)"),
    ("cut-after.json", '[{"text": "one"}\n', "not JSON (Expecting ',' delimiter at line 2, column 1)"),
]


@pytest.mark.parametrize(("name", "content", "says"), CUT_SHORT)
def test_a_record_file_cut_short_says_so(tmp_path, name, content, says):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_documents([path])
    assert str(err.value).startswith(f"{path}: {says}") and "looks cut short" in str(err.value)
    assert " at at " not in str(err.value)


def test_a_damaged_line_inside_a_jsonl_file_is_not_called_cut_short(tmp_path):
    path = tmp_path / "mid.jsonl"
    path.write_text('{"text": "ok\n{"text": "two"}\n', encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_documents([path])
    assert str(err.value).startswith(f"{path}: line 1 is not JSON (Invalid control character at column 13)")
    assert "cut short" not in str(err.value)


def test_a_parquet_file_without_the_column_or_with_nulls(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"body": ["a"]}), path)
    with pytest.raises(
        DataError,
        match=r"t\.parquet: no column 'text' \(its columns: body\); name the text column with --text-field NAME",
    ):
        read_documents([path])
    pq.write_table(pa.table({"text": ["a", None, "c"]}), path)
    with pytest.raises(DataError, match=r"row 2 has a null 'text'.*--skip-bad-records"):
        read_documents([path])
    docs, info = read_documents([path], skip_bad_records=True)
    assert [d.text for d in docs] == ["a", "c"] and info["bad_records"]["count"] == 1
    pq.write_table(pa.table({"text": [1, 2]}), path)
    with pytest.raises(DataError, match="column 'text' holds int64, not strings"):
        read_documents([path])


def test_a_csv_without_the_column_or_with_a_short_row(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,body\n1,x\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"no column 'text' in the header row \(its columns: id, body\)"):
        read_documents([path])
    path.write_text("id,text\n1,x\n2\n3,z\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 3 has 1 fields, no 'text'"):
        read_documents([path])
    docs, info = read_documents([path], skip_bad_records=True)
    assert [d.text for d in docs] == ["x", "z"] and info["bad_records"]["count"] == 1


def test_json_that_is_no_array_and_damaged_compression(tmp_path):
    path = tmp_path / "package.json"
    path.write_text('{"name": "x"}', encoding="utf-8")
    with pytest.raises(DataError, match="the JSON is an object, not an array of records"):
        read_documents([path])
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match=r"c\.jsonl\.gz: not valid gzip data"):
        read_documents([path])


@pytest.mark.parametrize(
    "name, expected",
    [
        ("a.jsonl", ("jsonl", None)),
        ("a.JSONL.ZST", ("jsonl", "zstd")),
        ("b.ndjson.gz", ("jsonl", "gzip")),
        ("c.parquet", ("parquet", None)),
        ("d.csv.bz2", ("csv", "bz2")),
        ("e.txt.xz", ("text", "xz")),
        ("f", ("text", None)),
        ("g.py", ("text", None)),
        ("h.gz", ("text", "gzip")),
    ],
)
def test_the_format_comes_from_the_name(name, expected):
    assert file_format(name) == expected


def test_a_jsonl_run_trains_on_records_as_documents(tmp_path, shakespeare):
    from octlm.cli import main
    from octlm.data.tokenizer import Tokenizer

    lines = shakespeare.read_text(encoding="utf-8")[:60_000].split("\n\n")
    corpus = tmp_path / "plays.jsonl.gz"
    corpus.write_bytes(gzip.compress(_jsonl(lines) + b"not json\n"))
    out = tmp_path / "run"
    args = [
        "train",
        "--text",
        str(corpus),
        "--out",
        str(out),
        "--vocab-size",
        "300",
        "--context-length",
        "16",
        "--d-model",
        "16",
        "--n-heads",
        "2",
        "--n-layers",
        "1",
        "--max-steps",
        "2",
        "--batch-size",
        "2",
        "--sample-tokens",
        "0",
        "--quiet",
    ]
    assert main(args) == 1  # the bad line stops it, naming line and fix
    assert main([*args, "--skip-bad-records"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"][0]["records"] == len(lines) and manifest["bad_records"]["count"] == 1
    # each record is split like a file: its first 90% of characters train, followed by the end-of-text marker
    tokenizer = Tokenizer.load(out / "tokenizer.json")
    expected = []
    for text in lines:
        if piece := text[: int(len(text) * 0.9)]:
            expected += [*tokenizer.encode(piece), tokenizer.eot_id]
    train = np.fromfile(out / "train.bin", dtype=manifest["tokens"]["train"]["dtype"])
    assert train.tolist() == expected


@pytest.fixture
def streamed(monkeypatch):
    """Preparation streams above a few kB instead of 128 MiB, in groups of 4 kB: the path a large corpus takes, on a
    small one."""
    import octlm.train.corpus

    monkeypatch.setattr(octlm.train.corpus, "TOKENIZER_SAMPLE_BYTES", 20_000)
    monkeypatch.setattr(octlm.train.corpus, "STREAM_GROUP_BYTES", 4_000)


TRAIN_ARGS = flags(
    vocab_size=300,
    context_length=16,
    d_model=16,
    n_heads=2,
    n_layers=1,
    max_steps=2,
    batch_size=2,
    sample_tokens=0,
    quiet=True,
)


def test_a_corpus_above_the_sample_size_streams_to_the_same_token_files(streamed, tmp_path, shakespeare):
    from octlm.cli import main
    from octlm.data.text import split_documents
    from octlm.data.tokenizer import Tokenizer
    from octlm.data.tokens import encode_stream

    text = shakespeare.read_text(encoding="utf-8")[:150_000]
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.jsonl.zst").write_bytes(COMPRESSORS["zstd"](_jsonl(text[:100_000].split("\n\n"))))
    (folder / "b.txt").write_text(text[100_000:], encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "--text", str(folder), "--out", str(out), *TRAIN_ARGS]) == 0
    docs, info = read_documents([folder])
    # the documented sample: the training split of the first documents, up to the one whose text passes 20,000 bytes
    total, first = 0, []
    for doc in docs:
        first.append(doc)
        total += doc.n_bytes
        if total > 20_000:
            break
    tokenizer = Tokenizer.load(out / "tokenizer.json")
    assert tokenizer.hf.get_vocab() == Tokenizer.train(split_documents(first, 0.1)[0], 300).hf.get_vocab()
    manifest = json.loads((out / "manifest.json").read_text())
    train_texts, val_texts = split_documents(docs, 0.1)
    for split, texts in (("train", train_texts), ("val", val_texts)):
        expected = encode_stream(tokenizer, texts)
        stored = (out / f"{split}.bin").read_bytes()
        assert stored == expected.astype("<u2").tobytes()
        assert manifest["tokens"][split] == {
            "file": f"{split}.bin",
            "dtype": "uint16",
            "count": len(expected),
            "sha256": hashlib.sha256(stored).hexdigest(),
        }
    assert manifest["files"] == info["files"] and manifest["total_bytes"] == sum(d.n_bytes for d in docs)
    assert not list(out.glob(".*.tmp"))


def test_ctrl_c_while_a_corpus_streams_leaves_nothing(streamed, tmp_path, shakespeare, monkeypatch):
    import octlm.data.tokens
    from octlm.cli import main

    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(_jsonl(shakespeare.read_text(encoding="utf-8")[:100_000].split("\n\n")))
    real, calls = octlm.data.tokens.encode_into, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(octlm.data.tokens, "encode_into", interrupted)
    assert main(["train", "--text", str(corpus), "--out", str(tmp_path / "run"), *TRAIN_ARGS]) == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]


def test_a_file_whose_every_record_was_skipped_says_so(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('[1, 2]\n"str"\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl: all 2 of its jsonl records were bad and skipped"):
        read_documents([path], skip_bad_records=True)


def test_an_empty_text_field_is_refused_by_its_flag(tmp_path, capsys):
    from octlm.cli import main

    assert main(["train", "--text-field", "", "--out", str(tmp_path / "run"), "--max-steps", "2"]) == 1
    assert "--text-field must name a field, got ''" in capsys.readouterr().err
