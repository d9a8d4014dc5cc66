"""Faults of the corpus readers found by trying bad and unusual files on them, one test per fault.

Each file is written by the format's own library (zlib's xz and zstd framing
by ``lzma`` and ``zstandard``, CSV by :mod:`csv`, Parquet by ``pyarrow``) or
cut and damaged by hand, and what octlm reads back is checked against the
texts written, or against the one-line error that names the file and the fix.
"""

from __future__ import annotations

import csv
import json
import lzma
import os
import subprocess
import sys

import pytest

from octlm.data.reading import read_documents
from octlm.errors import DataError
from tests.conftest import TINY_MODEL

TINY = [*TINY_MODEL, "--context-length", "32", "--sample-tokens", "0"]


def _octlm(*args: str) -> subprocess.CompletedProcess:
    """``octlm ARGS`` in a fresh process, so an escaped exception shows as the traceback a person would see."""
    return subprocess.run([sys.executable, "-m", "octlm", *args], capture_output=True, text=True, timeout=600)


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("octlm: error: "), result.stderr
    return lines[0]


@pytest.mark.slow
def test_a_truncated_zst_is_refused(tmp_path, shakespeare):
    """Fault 1: the first 60% of a .zst file (a download cut off) trained silently on its complete blocks, exit 0."""
    zstandard = pytest.importorskip("zstandard")
    text = shakespeare.read_bytes()[:250_000]
    whole = zstandard.ZstdCompressor().compress(text)
    cut = tmp_path / "plays.txt.zst"
    cut.write_bytes(whole[: len(whole) * 6 // 10])
    out = tmp_path / "run"
    error = _one_line_error(_octlm("train", "--text", str(cut), "--out", str(out), *TINY))
    assert f"{cut}: not valid zstd data" in error and "cut short" in error and "fetch it again" in error
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["plays.txt.zst"]
    # A valid file is read whole: two frames one after the other, as `cat a.zst b.zst` or pzstd write them.
    second = zstandard.ZstdCompressor().compress(b"\nEPILOGUE\n")
    cut.write_bytes(whole + second)
    (doc,), _ = read_documents([cut])
    assert doc.text.encode() == text + b"\nEPILOGUE\n"


def test_xz_stream_padding_is_read_as_xz_does(tmp_path):
    """Fault 2: a valid .xz with four zero bytes of stream padding after the stream was refused as not valid xz."""
    path = tmp_path / "notes.txt.xz"
    path.write_bytes(lzma.compress(b"first stream") + bytes(4) + lzma.compress(b", second stream") + bytes(8))
    (doc,), info = read_documents([path])
    assert doc.text == "first stream, second stream" and info["files"][0]["compression"] == "xz"
    records = tmp_path / "c.jsonl.xz"
    records.write_bytes(lzma.compress(b'{"text": "one"}\n{"text": "two"}\n') + bytes(4))
    assert [d.text for d in read_documents([records])[0]] == ["one", "two"]
    # Padding is whole 4-byte units (xz -t refuses three zero bytes), and a stream cut short is no stream.
    path.write_bytes(lzma.compress(b"first stream") + bytes(3))
    with pytest.raises(DataError, match=r"notes\.txt\.xz: not valid xz data \(.*not a multiple of 4"):
        read_documents([path])
    path.write_bytes(lzma.compress(b"first stream")[:-6])
    with pytest.raises(DataError, match=r"notes\.txt\.xz: not valid xz data \(.*cut short"):
        read_documents([path])


def test_an_unclosed_csv_quote_is_refused_naming_its_line(tmp_path):
    """Fault 3: a 200-row CSV whose row 7 opens a quote and never closes it trained on 6 records, exit 0."""
    lines = ["id,text"] + [f"{i},row number {i}" for i in range(1, 201)]
    lines[7] = '7,"opens a quote and never closes it'
    path = tmp_path / "rows.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for skip in (False, True):  # no record is bad on its own: the file's quoting is, so skipping does not apply
        with pytest.raises(DataError) as err:
            read_documents([path], skip_bad_records=skip)
        assert str(err.value).startswith(f"{path}: line 8: a quoted field opens in this row and never closes")
        assert "close the quote" in str(err.value)
    # A quote that closes inside a field (so the lines between would become one field) names both lines.
    lines[7], lines[50] = '7,"opens here', '50,closes" here'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"rows\.csv: line 51 is not valid CSV .* the row that began on line 8"):
        read_documents([path])
    # Valid quoting is read whole: commas, line breaks and doubled quotes inside quoted fields, as csv.writer writes.
    texts = [f'row {i}, with "quotes",\nand a second line' for i in range(200)]
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([["id", "text"], *([i, t] for i, t in enumerate(texts))])
    assert [d.text for d in read_documents([path])[0]] == texts


def test_a_lone_surrogate_in_jsonl_names_its_line(tmp_path):
    """Fault 4: a JSON Lines record holding an escaped lone surrogate ("\\ud800") crashed with a UnicodeEncodeError
    traceback."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "good one"}\n{"text": "half a pair: \\ud800!"}\n{"text": "good two"}\n', encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_documents([path])
    message = str(err.value)
    assert message.startswith(f"{path}: line 2: field 'text' holds a lone surrogate (\\ud800, character 14)")
    assert "--skip-bad-records" in message
    docs, info = read_documents([path], skip_bad_records=True)
    assert [d.text for d in docs] == ["good one", "good two"]
    assert info["bad_records"]["count"] == 1 and info["files"][0]["bad_records"] == 1
    # the same in a .json array, by element
    array = tmp_path / "c.json"
    array.write_text('[{"text": "ok"}, {"text": "\\udfff"}]', encoding="utf-8")
    with pytest.raises(DataError, match=r"c\.json: element 1: field 'text' holds a lone surrogate \(\\udfff"):
        read_documents([array])


def test_a_dictionary_encoded_parquet_column_is_read(tmp_path):
    """Fault 5: a dictionary-encoded Parquet string column (pandas' categorical column) was refused as not strings."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    texts = ["spam", "eggs", "spam", "ham", "spam"]
    path = tmp_path / "menu.parquet"
    pq.write_table(pa.table({"text": pa.array(texts).dictionary_encode()}), path, row_group_size=2)
    assert pa.types.is_dictionary(pq.ParquetFile(path).schema_arrow.field("text").type)  # what the reader meets
    docs, info = read_documents([path])
    assert [d.text for d in docs] == texts and info["files"][0]["records"] == 5
    # large strings too
    pq.write_table(pa.table({"text": pa.array(texts, pa.large_string()).dictionary_encode()}), path)
    assert [d.text for d in read_documents([path])[0]] == texts


def test_parquet_bytes_that_are_not_utf8_name_the_row(tmp_path):
    """Fault 6: a Parquet string column holding bytes that are not UTF-8 crashed with a UnicodeDecodeError
    traceback."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    # Parquet does not check UTF-8: a writer may store any bytes in a string column (here Latin-1 "café").
    strings = pa.array([b"good one", b"caf\xe9", b"good two"], pa.binary()).view(pa.string())
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": strings}), path)
    with pytest.raises(DataError) as err:
        read_documents([path])
    message = str(err.value)
    assert message.startswith(f"{path}: row 2: 'text' holds bytes that are not UTF-8 (byte 0xe9 at offset 3)")
    assert "--skip-bad-records" in message
    docs, info = read_documents([path], skip_bad_records=True)
    assert [d.text for d in docs] == ["good one", "good two"] and info["bad_records"]["count"] == 1
    # a dictionary-encoded column decodes its values the same way
    pq.write_table(pa.table({"text": pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), strings)}), path)
    with pytest.raises(DataError, match=r"t\.parquet: row 2: 'text' holds bytes that are not UTF-8"):
        read_documents([path])


@pytest.mark.parametrize(
    "compression, checksums, damaged",
    [
        ("snappy", False, 40),
        ("zstd", False, 40),
        ("gzip", False, 40),
        ("none", False, 40),  # pyarrow's ArrowInvalid, a ValueError, not the OSError of the codecs
        ("none", True, 1),  # one bit: without the page checksum checked, one row's text changes silently
    ],
)
def test_a_damaged_parquet_page_names_file_and_row_group(tmp_path, compression, checksums, damaged):
    """Fault 7: a damaged data page in one Parquet file of a folder ended with "octlm: error: Corrupt snappy
    compressed data." naming no file (with other page compressions, an ArrowInvalid traceback)."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("some plain text", encoding="utf-8")
    path = folder / "b.parquet"
    texts = [f"record {i}: " + "words of a document " * 20 for i in range(3000)]
    table = pa.table({"text": texts})
    pq.write_table(
        table, path, row_group_size=1000, compression=compression, use_dictionary=False, write_page_checksum=checksums
    )
    chunk = pq.ParquetFile(path).metadata.row_group(1).column(0)
    middle = chunk.data_page_offset + chunk.total_compressed_size // 2
    data = bytearray(path.read_bytes())
    data[middle : middle + damaged] = bytes(b ^ (0x5A if damaged > 1 else 1) for b in data[middle : middle + damaged])
    path.write_bytes(bytes(data))
    with pytest.raises(DataError) as err:
        read_documents([folder])
    assert str(err.value).startswith(f"{path}: row group 2 of 3 (rows 1001-2000) is damaged (")
    assert "fetch or write the file again, or leave it out of --text" in str(err.value)


@pytest.mark.slow
def test_a_folder_skips_record_files_without_the_text_field(tmp_path, shakespeare):
    """Fault 8: a folder with a package.json and an unrelated data/results.csv beside the text (a code repository)
    stopped the whole run on the CSV's missing text column."""
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "README.md").write_text(shakespeare.read_text(encoding="utf-8")[:30_000], encoding="utf-8")
    (repo / "index.js").write_text("export const answer = () => 42;\n", encoding="utf-8")
    (repo / "package.json").write_text('{"name": "demo", "version": "1.0.0"}', encoding="utf-8")
    (repo / "data" / "results.csv").write_text("model,score\nbig,0.91\nsmall,0.72\n", encoding="utf-8")
    (repo / "data" / "runs.jsonl").write_text('{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.1}\n', encoding="utf-8")
    out = tmp_path / "run"
    result = _octlm("train", "--text", str(repo), "--out", str(out), *TINY)
    assert result.returncode == 0, result.stderr
    assert "skipped 3 record file(s) in folders that are not records of the text field" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(os.path.basename(f["path"]) for f in manifest["files"]) == ["README.md", "index.js"]
    reasons = {os.path.basename(s["path"]): s["reason"] for s in manifest["skipped"]}
    assert reasons == {
        "package.json": "json without the field: the JSON is an object, not an array of records",
        "results.csv": "csv without the field: no column 'text' in the header row (its columns: model, score)",
        "runs.jsonl": "jsonl without the field: line 1 has no field 'text' (its fields: step, loss)",
    }
    # Named on the command line, the same file is the user's own choice and fails loudly.
    error = _one_line_error(
        _octlm("train", "--text", str(repo / "data" / "results.csv"), "--out", str(tmp_path / "named"), *TINY)
    )
    assert "results.csv: no column 'text' in the header row (its columns: model, score)" in error
    assert "record file without the --text-field" in " ".join(_octlm("train", "--help").stdout.split())


def test_a_symlinked_subfolder_is_followed_and_a_loop_listed(tmp_path):
    """Fault 23: a symbolic link to a folder inside a --text folder was dropped without a word (neither read nor
    listed as skipped)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "linked.txt").write_text("text from the linked folder", encoding="utf-8")
    corpus = tmp_path / "corpus"
    (corpus / "own").mkdir(parents=True)
    (corpus / "own" / "a.txt").write_text("text of my own", encoding="utf-8")
    (corpus / "more").symlink_to(elsewhere, target_is_directory=True)
    (corpus / "own" / "up").symlink_to(corpus, target_is_directory=True)  # a loop back to the top
    (corpus / "again").symlink_to(corpus / "own", target_is_directory=True)  # a second way to one folder
    docs, info = read_documents([corpus])
    assert sorted(d.text for d in docs) == ["text from the linked folder", "text of my own"]
    assert sorted(f["path"] for f in info["files"]) == [
        str(corpus / "more" / "linked.txt"),
        str(corpus / "own" / "a.txt"),
    ]
    skipped = {s["path"]: s["reason"] for s in info["skipped"]}
    assert skipped == {
        str(corpus / "again"): f"a symbolic link to {corpus / 'own'}, read there",
        str(corpus / "own" / "up"): f"a symbolic link to {corpus}, a folder above it (a loop); not followed",
    }
