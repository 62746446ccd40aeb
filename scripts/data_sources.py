"""The documents of a corpus, read one at a time (scripts/prepare_data.py).

Inputs, by file name (after an optional .gz or .zst, decompressed as a
stream):
  *.jsonl, *.json   one JSON object per line, the document at --text-key
  *.parquet         the --text-key column, 256 rows at a time (pyarrow)
  anything else     plain UTF-8 text, one document per file; a file larger
                    than max_doc_bytes is cut at line boundaries into
                    documents of at most that size (a single longer line is
                    cut where it reaches it, never inside a character)
Directories are walked (sorted); globs expand ('**' recurses). The order of
documents is the sorted order of the files, then the order inside each file,
so a corpus reads the same way every time.

Memory: one document (or 256 Parquet rows of its column) at a time, plus the
decompressor's window; never the whole file, except a Parquet file under an
outer .gz or .zst, which pyarrow needs decompressed (seekable) in memory.

Standard library only, except pyarrow for Parquet and zstandard for .zst,
imported when such a file is met (with an error naming the package).
"""

import glob
import gzip
import io
import json
import os


class SourceError(Exception):
    """Bad input, named by file (and line): printed as one error line."""


def kind_of(path):
    """('jsonl' | 'parquet' | 'text', compression '' | 'gz' | 'zst')."""
    name = path.lower()
    comp = ""
    for ext in (".gz", ".zst"):
        if name.endswith(ext):
            comp, name = ext[1:], name[: -len(ext)]
    if name.endswith((".jsonl", ".json")):
        return "jsonl", comp
    if name.endswith(".parquet"):
        return "parquet", comp
    return "text", comp


def expand_inputs(patterns):
    """Files, directories and globs (relative to the working directory) ->
    sorted unique files. A pattern matching nothing is an error."""
    files = set()
    for pattern in patterns:
        matches = glob.glob(pattern, recursive=True) if any(c in pattern for c in "*?[") \
            else ([pattern] if os.path.exists(pattern) else [])
        if not matches:
            raise SourceError(f"--input {pattern!r} matches no file or directory")
        for m in matches:
            if os.path.isdir(m):
                for dirpath, dirnames, filenames in os.walk(m):
                    dirnames.sort()
                    files.update(os.path.abspath(os.path.join(dirpath, f)) for f in filenames)
            elif os.path.isfile(m):
                files.add(os.path.abspath(m))
    if not files:
        raise SourceError(f"--input {' '.join(patterns)} holds no file")
    return sorted(files)


class CountingReader(io.RawIOBase):
    """A raw file that counts the bytes read from disk (the progress line's
    position, compressed bytes for a compressed file)."""

    def __init__(self, f):
        self.f, self.count = f, 0

    def readable(self):
        return True

    def readinto(self, b):
        n = self.f.readinto(b)
        self.count += n or 0
        return n

    def close(self):
        self.f.close()
        super().close()


def open_stream(path, comp, counter):
    """A buffered binary stream of the decompressed file; counter.count
    follows the bytes read from disk."""
    raw = io.BufferedReader(counter, 1 << 20)
    if comp == "gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if comp == "zst":
        try:
            import zstandard
        except ImportError:
            raise SourceError(f"{path}: .zst input needs the zstandard package "
                              "(WITH_PYPI=1 scripts/install_deps.sh)") from None
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw), 1 << 20)
    return raw


class Document:
    """One document: its UTF-8 bytes and where it came from (for errors)."""
    __slots__ = ("data", "where")

    def __init__(self, data, where):
        self.data, self.where = data, where


def incomplete_utf8_tail(data):
    """How many bytes at the end of `data` start a UTF-8 character that
    continues past it (0 to 3)."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b & 0xC0 != 0x80:  # a lead byte (or ASCII): does its character fit?
            need = 2 if b >= 0xC0 and b < 0xE0 else 3 if b >= 0xE0 and b < 0xF0 \
                else 4 if b >= 0xF0 else 1
            return back if need > back else 0
    return 0


def text_documents(path, stream, max_doc_bytes, stats):
    """One document per file; a longer file cut at line boundaries (a line
    longer than max_doc_bytes where it reaches it, never inside a UTF-8
    character)."""
    parts, size, cut, part = [], 0, False, 0
    carry = b""
    for piece in iter(lambda: stream.readline(max_doc_bytes), b""):
        line = carry + piece
        carry = b""
        if not line.endswith(b"\n"):  # a cut inside a long line: keep characters whole
            tail = incomplete_utf8_tail(line)
            if tail:
                line, carry = line[:-tail], line[-tail:]
        if size + len(line) > max_doc_bytes and parts:
            part += 1
            yield Document(b"".join(parts), f"{path} (part {part})")
            parts, size, cut = [], 0, True
        parts.append(line)
        size += len(line)
    if carry:
        parts.append(carry)
    if parts or not cut:
        yield Document(b"".join(parts), f"{path} (part {part + 1})" if cut else path)
    if cut:
        stats["files_split"] = stats.get("files_split", 0) + 1


def jsonl_documents(path, stream, text_key):
    for n, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise SourceError(f"{path}:{n}: not a JSON object ({e})") from None
        if not isinstance(obj, dict) or text_key not in obj:
            keys = ", ".join(sorted(obj)[:8]) if isinstance(obj, dict) else type(obj).__name__
            raise SourceError(f"{path}:{n}: no {text_key!r} key (--text-key; it has: {keys})")
        text = obj[text_key]
        if not isinstance(text, str):
            raise SourceError(f"{path}:{n}: {text_key!r} is a {type(text).__name__}, "
                              "expected a string")
        # json.loads already decoded the line; lone surrogates cannot encode.
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:
            yield Document(None, f"{path}:{n} ({e.reason})")
            continue
        yield Document(data, f"{path}:{n}")


def parquet_documents(path, stream, text_key):
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError:
        raise SourceError(f"{path}: Parquet input needs pyarrow "
                          "(WITH_PYPI=1 scripts/install_deps.sh)") from None
    # Sequential reads on this thread: Arrow's thread pools would
    # reserve a stack per core for what is a sequential read.
    pyarrow.set_io_thread_count(1)
    pyarrow.set_cpu_count(1)
    try:  # freed Arrow memory goes back at once rather than after jemalloc's decay
        pyarrow.jemalloc_set_decay_ms(0)
    except Exception:  # a pyarrow built without jemalloc
        pass
    try:
        pf = pq.ParquetFile(stream)
        names = pf.schema_arrow.names
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise SourceError(f"{path}: unreadable Parquet ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200]})") from None
    if text_key not in names:
        raise SourceError(f"{path}: no {text_key!r} column (--text-key; it has: "
                          f"{', '.join(names[:8])})")
    row, group = 0, 0
    try:
        # Batches of rows (a row group may hold gigabytes of text).
        for batch in pf.iter_batches(batch_size=256, columns=[text_key], use_threads=False):
            for value in batch.column(0).to_pylist():
                row += 1
                if value is None:
                    yield Document(b"", f"{path} row {row} (null)")
                    continue
                yield Document(value.encode("utf-8", "surrogatepass")
                               if isinstance(value, str) else bytes(value),
                               f"{path} row {row}")
    except SourceError:
        raise
    except Exception as e:
        raise SourceError(f"{path}: unreadable Parquet at row {row} ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200]})") from None


def documents(paths, text_key, max_doc_bytes, stats, position):
    """Every document of `paths` in order. stats gains files_split; position
    is a dict whose 'bytes' follows the bytes read from disk over all files
    (for the progress line)."""
    done = 0
    for path in paths:
        kind, comp = kind_of(path)
        try:
            f = open(path, "rb", buffering=0)
        except OSError as e:
            raise SourceError(f"{path}: cannot open ({e.strerror})") from None
        counter = CountingReader(f)
        try:
            stream = open_stream(path, comp, counter)
            if kind == "parquet":
                # pyarrow needs a seekable file: a compressed one is decompressed
                # in memory, one file at a time (Parquet compresses inside anyway).
                src = io.BytesIO(stream.read()) if comp else f
                docs = parquet_documents(path, src, text_key)
            elif kind == "jsonl":
                docs = jsonl_documents(path, stream, text_key)
            else:
                docs = text_documents(path, stream, max_doc_bytes, stats)
            for doc in docs:
                position["bytes"] = done + (counter.count if kind != "parquet" or comp
                                            else f.tell())
                yield doc
        except SourceError:
            raise
        except Exception as e:  # a truncated or corrupt (compressed) file: OSError,
            # EOFError, zstandard.ZstdError
            raise SourceError(f"{path}: cannot read ({type(e).__name__}: {e})") from None
        finally:
            f.close()
        done += os.path.getsize(path)
        position["bytes"] = done
