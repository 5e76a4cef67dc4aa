"""Property-based fuzzing: generated bad inputs, so the next bad-input case is found here.

Generated inputs for the readers (CSV, TSV, JSONL, text lines, CoNLL: random bytes,
encodings, BOMs, quotes, NULs, long fields, mixed line endings, gzip), for config files and
overrides (random keys, types, nesting) and for the export loader (truncated, bit-flipped
and deleted files of a real small export). Every property checks what a user relies on:

* an entry point either succeeds, and then what tfapp wrote reads back the same (prepared
  shards hold exactly the rows the reader gave; a config saved as YAML loads back equal), or
  it raises a ``ConfigError`` (``DataError`` is one) of one line, which the commands print
  as ``tfapp: error: ...`` with exit code 2 -- never another exception;
* the input files are never changed or deleted (hashed before and after).

The library entry points are called in-process (fast); ``test_cli_*`` run a few generated
examples through the commands' ``main(argv)`` as tests/test_bad_inputs.py does.

Profiles (``TFAPP_FUZZ_PROFILE``): ``ci`` (default) is derandomized (the same examples on
every run) and small, well under a minute for the whole file; ``long`` multiplies every
test's examples by ``TFAPP_FUZZ_SCALE`` (default 25) with a random seed each run --
``scripts/fuzz_long.py`` runs it and counts inputs and failures. A failure found there is
fixed in tfapp and kept as a row of tests/test_bad_inputs.py.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gzip
import hashlib
import importlib
import json
import os
import shutil
import string
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import TASK_CONFIGS, ConfigError, load_config, to_yaml
from tfapp.data.formats.files import detect_format
from tfapp.data.prepare import builder as P
from tfapp.data.rows.bad_rows import SourceLog
from tfapp.data.rows.columnar import BytesList
from tfapp.data.rows.read import python_rows
from tfapp.data.rows.spec import RowSpec

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]

settings.register_profile(
    "ci", derandomize=True, deadline=None, database=None, print_blob=True,
    suppress_health_check=list(HealthCheck))
settings.register_profile(  # a new seed each run: the long runs look further each time
    "long", deadline=None, database=None, print_blob=True,
    suppress_health_check=list(HealthCheck))
PROFILE = os.environ.get("TFAPP_FUZZ_PROFILE", "ci")
if PROFILE not in ("ci", "long"):
    raise ValueError(f"TFAPP_FUZZ_PROFILE={PROFILE!r}: choose ci or long")
SCALE = int(os.environ.get("TFAPP_FUZZ_SCALE", "25")) if PROFILE == "long" else 1

#: inputs each property was given (scripts/fuzz_long.py reports them)
TRIED: collections.Counter[str] = collections.Counter()


def fuzz(examples: int, *, shrink: bool = True) -> settings:
    """The profile's settings with ``examples`` (ci) or ``examples * SCALE`` (long);
    ``shrink=False`` where an example takes seconds (shrinking would take many minutes,
    and a few file changes need no shrinking to be read)."""
    phases = [p for p in Phase if shrink or p not in (Phase.shrink, Phase.explain)]
    return settings(settings.get_profile(PROFILE), max_examples=examples * SCALE,
                    phases=phases)


# ----------------------------------------------------------------------------- helpers
@contextlib.contextmanager
def _tmpdir() -> Iterator[Path]:
    """A fresh folder per example (pytest's tmp_path is one per test, not per example)."""
    with tempfile.TemporaryDirectory(prefix="tfapp-fuzz-") as name:
        yield Path(name)


def _hashes(root: Path) -> dict[str, str]:
    """Every file under ``root`` (or ``root`` itself) -> sha256 of its bytes."""
    files = [root] if root.is_file() else sorted(f for f in root.rglob("*") if f.is_file())
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _one_line(err: ConfigError) -> None:
    """What ``tfapp: error: {err}`` needs: a message, on one line."""
    msg = str(err)
    assert msg.strip(), f"empty message from {type(err).__name__}"
    assert "\n" not in msg and "\r" not in msg, f"message of several lines: {msg!r}"
    assert "Traceback" not in msg, msg
    msg.encode("utf-8")  # no lone surrogate: stderr, a log file or a pipe can hold it


def _records(files: list[str]) -> Iterator[bytes]:
    """The records of TFRecord files, read by hand (length, crc, data, crc): no TensorFlow
    between what tfapp wrote and what is compared."""
    for name in files:
        data = Path(name).read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            yield data[at + 12:at + 12 + length]
            at += 12 + length + 4


def _prepared_rows(manifest) -> list[tuple[int, dict[str, Any]]]:
    """(line, features) of every prepared record, in shard order."""
    import tensorflow as tf

    out = []
    for record in _records(manifest.files()):
        feats = tf.train.Example.FromString(record).features.feature
        line = feats["id"].int64_list.value[0] & ((1 << P.SOURCE_SHIFT) - 1)
        out.append((line, {k: list(v.bytes_list.value) for k, v in feats.items()
                           if k not in ("id", "bucket")}))
    return out


def _reader_rows(path: str, fmt: str, spec: RowSpec, mode: str
                 ) -> tuple[list[tuple[int, dict[str, Any]]], dict[str, int], int]:
    """(rows, label counts, bad rows) as the Python readers give them: what prepared shards
    must hold whichever reader (pyarrow or csv) prepared the file."""
    log = SourceLog(path, mode, "train", "data.on_bad_rows=skip")
    rows = []
    for batch in python_rows(path, fmt, spec, log):
        cols = {}
        for name, col in batch.columns.items():
            if isinstance(col, BytesList):
                vals = col.values.to_pylist()
                cols[name] = [vals[col.offsets[i]:col.offsets[i + 1]] for i in range(len(col))]
            else:
                cols[name] = [[v] for v in col.to_pylist()]
        rows += [(int(batch.lines[i]), {k: cols[k][i] for k in cols})
                 for i in range(len(batch))]
    return rows, log.labels, log.report.count


# ------------------------------------------------------------------------ data files
# Pieces that matter to some reader, and bytes that matter to none.
PIECES = [b",", b"\t", b'"', b'""', b"'", b"\n", b"\r\n", b"\r", b"\x00", b"\xef\xbb\xbf",
          b"\xff", b"\xfe\xff", b"\xc3", b"\xc3\xa9", b"\xe2\x80\xa8", b"\x85", b"\x0b",
          b"\x0c", b"\x1c", b" ", b"  ", b"\\", b"|", b"text", b"label", b"source", b"target",
          b"pos", b"neg", b"a b", b"__label__", b"__label__x", b"{", b"}", b"[", b"]", b":",
          b'"text"', b'"label"', b'"tokens"', b'"tags"', b"null", b"1e999", b"-DOCSTART-",
          b"O", b"B-PER", b"I-PER", b"E-LOC", b"S-ORG", b"B-", b"I-", b"\xed\xa0\x80",
          b"\\ud800", b"\\udc80", b"\\ud83d\\ude00"]
CHUNK = st.one_of(st.sampled_from(PIECES), st.binary(max_size=6),
                  st.text(max_size=4).map(lambda s: s.encode("utf-8", "surrogatepass")))
LINE = st.lists(CHUNK, max_size=8).map(b"".join)
WORD = st.sampled_from(["a", "b c", "é", "x,y", 'q"q', "t\tt", "", " ", "\u2028", "1",
                        "B-PER", "pos", "neg", "pos|neg", "\x00", "__label__a"])
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-LOC", "S-PER", "I-", "B-", "x"]


def _bytes(text: str) -> bytes:
    """``text`` as file bytes: undecodable bytes (U+DC80..U+DCFF) back as they were, other
    lone surrogates as the invalid UTF-8 of CESU-8."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _csv_body(delimiter: str) -> st.SearchStrategy[bytes]:
    quote = st.sampled_from([lambda w: w, lambda w: '"' + w.replace('"', '""') + '"'])
    field = st.builds(lambda q, w: q(w), quote, WORD)
    header = st.lists(st.sampled_from(["text", "label", "text_b", "source", "target", "x",
                                       " text", "label "]), min_size=1, max_size=4)
    row = st.lists(field, min_size=1, max_size=4).map(delimiter.join)
    return st.builds(lambda h, rows: "\n".join([delimiter.join(h), *rows]).encode(),
                     header, st.lists(row, max_size=6))


# (json.dumps writes a lone surrogate as the escape "\ud800", which json.loads takes back)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | WORD | st.text(max_size=5)
    | st.sampled_from(["a\ud800", "\udc80", "\ud83d\ude00"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(WORD, inner, max_size=3),
    max_leaves=6)
JSON_OBJ = st.dictionaries(st.sampled_from(["text", "label", "text_b", "source", "target",
                                            "tokens", "tags", "other"]), JSON_VALUE,
                           max_size=5)
TAGGED_OBJ = st.integers(0, 4).flatmap(lambda n: st.fixed_dictionaries({
    "tokens": st.lists(st.sampled_from(["Anna", "lives", "x y", "", "é", "\u2028", "\ud800"]),
                       min_size=n, max_size=n + (n == 2)),
    "tags": st.lists(st.sampled_from(TAGS), min_size=n, max_size=n)}))


def _jsonl_body() -> st.SearchStrategy[bytes]:
    line = st.one_of(JSON_OBJ.map(json.dumps), TAGGED_OBJ.map(json.dumps),
                     JSON_OBJ.map(lambda o: json.dumps(o, ensure_ascii=False)),
                     LINE.map(lambda b: b.decode("utf-8", "surrogateescape")))
    return st.lists(line, max_size=6).map(lambda lines: _bytes("\n".join(lines)))


def _conll_body() -> st.SearchStrategy[bytes]:
    token = st.builds(lambda w, t, extra: " ".join([w, *extra, t]),
                      st.sampled_from(["Anna", "lives", "é", "-DOCSTART-", "x\u2028y", "1"]),
                      st.sampled_from(TAGS), st.lists(st.sampled_from(["NNP", "_"]), max_size=2))
    line = st.one_of(token, token, st.just(""), st.just("  "), st.sampled_from(["Paris", "\t"]),
                     LINE.map(lambda b: b.decode("utf-8", "surrogateescape")))
    return st.lists(line, max_size=10).map(lambda lines: _bytes("\n".join(lines)))


def _text_body() -> st.SearchStrategy[bytes]:
    line = st.one_of(st.builds(lambda labels, words: " ".join(
        [*(f"__label__{x}" for x in labels), *words]),
        st.lists(st.sampled_from(["pos", "neg", "", "a|b"]), max_size=2),
        st.lists(WORD, max_size=3)), LINE.map(lambda b: b.decode("utf-8", "surrogateescape")))
    return st.lists(line, max_size=6).map(lambda lines: _bytes("\n".join(lines)))


BODIES = {"csv": _csv_body(","), "tsv": _csv_body("\t"), "jsonl": _jsonl_body(),
          "txt": _text_body(), "conll": _conll_body()}


@st.composite
def mangled(draw: st.DrawFn, body: bytes, huge: int = 9 << 20) -> bytes:
    """``body`` after a few of what editors, encodings and accidents do to a file (a field
    or line of up to ``huge`` bytes among them)."""
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["insert", "crlf", "cr", "bom", "encode", "truncate",
                                    "huge", "nul", "none"]))
        if how == "insert":
            at = draw(st.integers(0, len(body)))
            body = body[:at] + draw(LINE) + body[at:]
        elif how == "crlf":
            body = body.replace(b"\n", b"\r\n")
        elif how == "cr":
            body = body.replace(b"\n", b"\r")
        elif how == "bom":
            body = b"\xef\xbb\xbf" + body
        elif how == "encode":
            text = body.decode("utf-8", "replace")
            body = text.encode(draw(st.sampled_from(["utf-16", "utf-16-le", "utf-32",
                                                     "latin-1", "cp1252", "utf-8-sig"])),
                               "replace")
        elif how == "truncate" and body:
            body = body[:draw(st.integers(0, len(body) - 1))]
        elif how == "huge":  # a field or line far over csv's and any buffer's default size
            at = draw(st.integers(0, len(body)))
            body = body[:at] + b"w" * draw(st.sampled_from([min(1 << 17, huge), huge])) + body[at:]
        elif how == "nul":
            body = body.replace(b" ", b"\x00")
    return body


SPECS: dict[str, list[RowSpec]] = {
    "csv": [RowSpec(kind="labelled"), RowSpec(kind="labelled", multi_label=True),
            RowSpec(kind="labelled", text_pair_column="text_b"), RowSpec(kind="texts"),
            RowSpec(kind="pairs")],
    "txt": [RowSpec(kind="labelled"), RowSpec(kind="labelled", multi_label=True),
            RowSpec(kind="texts"), RowSpec(kind="pairs")],
    "conll": [RowSpec(kind="tagged", tag_scheme=s, tag_column=c)
              for s in ("iob2", "iob1", "bioes") for c in (-1, 1, 2)],
}
SPECS["tsv"] = SPECS["csv"]
SPECS["jsonl"] = SPECS["csv"] + [RowSpec(kind="tagged", tag_scheme=s)
                                 for s in ("iob2", "bioes")]


@st.composite
def data_files(draw: st.DrawFn, classifier: bool = False) -> tuple[str, bytes, RowSpec, str]:
    """(file name, bytes, how it is read, on_bad_rows mode); ``classifier``: a file for
    the classifier config's reader (text, label)."""
    ext = draw(st.sampled_from(["csv", "jsonl", "tsv", "txt"] if classifier else sorted(BODIES)))
    body = draw(st.one_of(BODIES[ext], BODIES[ext], st.binary(max_size=64)))
    body = draw(mangled(body))
    name = f"data.{ext}"
    if draw(st.integers(0, 9)) == 0:  # gzip: whole, cut short, or not gzip at all
        packed = gzip.compress(body)
        body = draw(st.sampled_from([packed, packed[:len(packed) // 2], body]))
        name += ".gz"
    spec = SPECS[ext][0] if classifier else draw(st.sampled_from(SPECS[ext]))
    return name, body, spec, draw(st.sampled_from(["fail", "skip"]))


@fuzz(150)
@given(data_files())
def test_prepare_reads_back_every_row_or_fails_in_one_line(case) -> None:
    name, body, spec, mode = case
    TRIED["prepare"] += 1
    with _tmpdir() as tmp:
        path = tmp / name
        path.write_bytes(body)
        before = _hashes(path)
        try:
            manifest = P.prepare([str(path)], str(tmp / "out"), spec, mode=mode)
        except ConfigError as err:
            _one_line(err)
        else:
            fmt = detect_format(name, spec.format, spec.kind)
            rows, labels, bad = _reader_rows(str(path), fmt, spec, mode)
            assert _prepared_rows(manifest) == rows
            assert manifest.rows == len(rows)
            assert manifest.labels == dict(sorted(labels.items()))
            assert manifest.bad_rows["count"] == bad
            if mode == "fail":
                assert bad == 0
        assert _hashes(path) == before



# Well-formed files written by Python's own csv and json modules (and by hand for fastText
# lines and CoNLL) from rows the test draws: the rows themselves are the oracle, so a
# reader that both prepare and the check above share cannot hide its own mistake here.
CLEAN_WORD = st.text("abcXYZé,\"'\t\u2028|", min_size=1, max_size=6).filter(
    lambda w: w.strip() == w)
CLEAN_TEXT = st.lists(CLEAN_WORD, min_size=1, max_size=4).map(" ".join)
CLEAN_LABEL = st.sampled_from(["pos", "neg", "b c"])
NAME_WORD = st.text("abcXYZé", min_size=1, max_size=6)


@st.composite
def tagged_sentence(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Words and valid IOB2 tags: an I- only continues an entity of its own type."""
    words = draw(st.lists(NAME_WORD, min_size=1, max_size=5))
    tags: list[str] = []
    for _ in words:
        options = ["O", "B-PER", "B-LOC"] + ([f"I-{tags[-1][2:]}"] if tags and
                                             tags[-1] != "O" else [])
        tags.append(draw(st.sampled_from(options)))
    return words, tags


def _written(fmt: str, rows: list) -> tuple[str, list[tuple[int, dict[str, Any]]]]:
    """The file body of ``rows`` in ``fmt`` and what prepare must hold: (line, features)."""
    import csv
    import io

    want = []
    if fmt == "tsv":  # no quoting in TSV: a quote is text, and a text holds no tab
        rows = [(t.replace("\t", " "), lab) for t, lab in rows]
        body = "text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in rows)
        want = [(i + 2, t, lab) for i, (t, lab) in enumerate(rows)]
    elif fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["text", "label"])
        for text, label in rows:
            line = out.getvalue().count("\n") + 1
            writer.writerow([text, label])
            want.append((line, text, label))
        body = out.getvalue()
    elif fmt == "jsonl":
        body = "".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in rows)
        want = [(i + 1, t, lab) for i, (t, lab) in enumerate(rows)]
    elif fmt == "txt":  # fastText: words are what a line holds, one space apart
        rows = [(" ".join(t.split()), lab.replace(" ", "_")) for t, lab in rows]
        body = "".join(f"__label__{lab} {t}\n" for t, lab in rows)
        want = [(i + 1, t, lab) for i, (t, lab) in enumerate(rows)]
    else:  # conll
        lines, tagged = [], []
        for words, tags in rows:
            tagged.append((len(lines) + 1, {"words": [w.encode() for w in words],
                                            "tags": [t.encode() for t in tags]}))
            lines += [f"{w} {t}" for w, t in zip(words, tags, strict=True)] + [""]
        return "\n".join(lines), tagged
    return body, [(line, {"text": [t.encode()], "labels": [lab.encode()]})
                  for line, t, lab in want]


@fuzz(20)
@given(st.sampled_from(["csv", "tsv", "jsonl", "txt"]),
       st.lists(st.tuples(CLEAN_TEXT, CLEAN_LABEL), min_size=1, max_size=6),
       st.lists(tagged_sentence(), min_size=1, max_size=4))
def test_prepare_holds_exactly_the_rows_python_wrote(fmt, rows, sentences) -> None:
    TRIED["prepare_oracle"] += 1
    with _tmpdir() as tmp:
        for name, spec, data in [(f"data.{fmt}", RowSpec(kind="labelled"), rows),
                                 ("data.conll", RowSpec(kind="tagged"), sentences)]:
            body, want = _written(name.rsplit(".", 1)[1], data)
            path = tmp / name
            path.write_bytes(body.encode("utf-8"))
            manifest = P.prepare([str(path)], str(tmp / f"out-{name}"), spec, mode="fail")
            # (prepare permutes the rows of a shard: compared in line order)
            assert sorted(_prepared_rows(manifest), key=lambda r: r[0]) == want, body


# ---------------------------------------------------------------------------- configs
def _nested_keys() -> list[str]:
    """The top-level and group keys of every task's class (a key of another task is an
    unknown key to the task a config names)."""
    out: list[str] = []
    for cls in TASK_CONFIGS.values():
        cfg = cls()
        for f in dataclasses.fields(cfg):
            value = getattr(cfg, f.name)
            out.append(f.name)
            if dataclasses.is_dataclass(value):
                out += [f"{f.name}.{g.name}" for g in dataclasses.fields(value)]
    return sorted(set(out))


KEYS = _nested_keys()
KEY = st.one_of(st.sampled_from(KEYS), st.sampled_from(KEYS).map(lambda k: k + "x"),
                st.text(string.ascii_letters + "._-[]$ 0\r\n\t", max_size=8))
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
                   st.sampled_from(["demo", "csv", "bert", "cnn", "1e-3", "0", "-1", "auto",
                                    "${oc.env:HOME}", "???", "builtin:tiny", "[]", "{}",
                                    "a\udc80", "\ud800"]))
VALUE = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(KEY, inner, max_size=3), max_leaves=8)


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": 1} -> {"a": {"b": 1}}; a dotted key under a leaf stays dotted."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        head, _, rest = key.partition(".")
        if rest and isinstance(out.setdefault(head, {}), dict):
            out[head][rest] = value
        else:
            out[key] = value
    return out


YAML_DOC = st.one_of(
    st.dictionaries(KEY, VALUE, max_size=6).map(_nest).map(
        lambda d: yaml.safe_dump(d, allow_unicode=True).encode()),
    st.dictionaries(st.sampled_from(KEYS), SCALAR, max_size=4).map(_nest).map(
        lambda d: yaml.safe_dump(d).encode()),
    LINE, st.sampled_from([b"", b"~\n", b"[1, 2]\n", b"x\n", b"!!python/object:os.system {}\n",
                           b"trainer: &a {epochs: *a}\n", b"? [a]\n: 1\n", b"2020-01-01: x\n",
                           b"trainer:\n  epochs: 2020-01-01\n", b"{1: 2}\n",
                           b"data: {train_files: !!binary aGk=}\n", b"\xef\xbb\xbfname: x\n",
                           b'name: "a\\ud800"\n', b'data: {train_files: "\\udc80.csv"}\n']))
OVERRIDE_VALUE = st.one_of(
    SCALAR.map(str), st.text(max_size=8),
    st.sampled_from(["", "[1,", "{a: 1}", "null", "~", "1e999", "nan", "-inf", "'", '"',
                     "[[]]", "{trainer: {epochs: 3}}", "!!binary aGk=", "&a", "*a", "=",
                     '"\\ud800"', "x\udcff",
                     "a=b", "\x00", "x\ny"]))
OVERRIDE = st.one_of(st.builds(lambda k, v: f"{k}={v}", KEY, OVERRIDE_VALUE),
                     st.text(max_size=10))


@st.composite
def config_cases(draw: st.DrawFn) -> tuple[bytes | None, list[str]]:
    doc = draw(st.one_of(st.none(), YAML_DOC.flatmap(lambda doc: mangled(doc, huge=1 << 16))))
    return doc, draw(st.lists(OVERRIDE, max_size=4))


@fuzz(40)
@given(config_cases())
def test_a_config_loads_and_reads_back_or_fails_in_one_line(case) -> None:
    doc, overrides = case
    TRIED["config"] += 1
    with _tmpdir() as tmp:
        path = None
        if doc is not None:
            path = tmp / "exp.yaml"
            path.write_bytes(doc)
        before = _hashes(tmp)  # the config file, if any
        try:
            cfg = load_config(path, overrides)
        except ConfigError as err:
            _one_line(err)
        else:  # the params.yaml tfapp writes of it loads back as the same config
            saved = tmp / "params.yaml"
            saved.write_text(to_yaml(cfg))
            assert load_config(saved) == cfg
        if path is not None:
            assert _hashes(path) == {str(path): before[str(path)]}


# ---------------------------------------------------------------------------- exports
def make_export(root: Path) -> Path:
    """A real small classifier export (a cnn: seconds to train), its directory."""
    csv_path = root / "good.csv"
    csv_path.write_text("text,label\n" + "".join(
        f"review {i} was {'great' if i % 2 else 'awful'},{'pos' if i % 2 else 'neg'}\n"
        for i in range(40)))
    from tfapp.tasks import get_task
    from tfapp.training.driver import train

    cfg = load_config(str(REPO / "configs" / "classifier_local.yaml"), [
        f"output_dir={root / 'runs'}", f"data.train_files={csv_path}", "model.kind=cnn",
        "trainer.epochs=1", "trainer.steps_per_epoch=1", "tracking.tensorboard=false"])
    train(cfg, task=get_task(cfg.task))
    return cfg.run_dir / "export"


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory) -> Path:
    return make_export(tmp_path_factory.mktemp("export"))


def _export_files(export: Path) -> list[str]:
    return sorted(str(f.relative_to(export)) for f in export.rglob("*") if f.is_file())


@st.composite
def damage(draw: st.DrawFn, files: list[str]) -> list[tuple[str, str, float, int]]:
    """One to three (file, how, where, bit) changes to an export's files."""
    return draw(st.lists(st.tuples(
        st.sampled_from(files),
        st.sampled_from(["truncate", "flip", "flip", "delete", "empty", "garbage"]),
        st.floats(0, 1), st.integers(0, 7)), min_size=1, max_size=3))


def _damaged_copy(export: Path, to: Path, changes: list[tuple[str, str, float, int]]) -> Path:
    shutil.copytree(export, to)
    for name, how, where, bit in changes:
        path = to / name
        if not path.is_file():
            continue
        data = bytearray(path.read_bytes())
        at = min(int(where * len(data)), max(len(data) - 1, 0))
        if how == "delete":
            path.unlink()
            continue
        if how == "truncate":
            data = data[:at]
        elif how == "flip" and data:
            data[at] ^= 1 << bit
        elif how == "empty":
            data = bytearray()
        elif how == "garbage":
            data[at:at + 16] = hashlib.sha256(bytes(data[:at])).digest()[:16]
        path.write_bytes(bytes(data))
    return to


def check_export(export: Path, changes: list[tuple[str, str, float, int]]) -> None:
    """The property of a damaged export: it loads and predicts, or one ConfigError line."""
    from tfapp.tasks.classifier.serving import LoadedClassifier

    TRIED["export"] += 1
    with _tmpdir() as tmp:
        copy = _damaged_copy(export, tmp / "export", changes)
        before = _hashes(copy)
        try:
            model = LoadedClassifier(copy)
            probs, labels = model.predict(["a fine review", ""])
            assert probs.shape == (2, len(model.label_names)) and len(labels) == 2
        except ConfigError as err:
            _one_line(err)
        assert _hashes(copy) == before


def test_damaged_exports_load_or_fail_in_one_line(export_dir) -> None:
    before = _hashes(export_dir)

    @fuzz(5, shrink=False)
    @given(damage(_export_files(export_dir)))
    def prop(changes) -> None:
        check_export(export_dir, changes)

    prop()
    assert _hashes(export_dir) == before


# -------------------------------------------------------------------- the commands' CLI
def run_cli(module: str, argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stderr) of ``module.main(argv)``, as tests/test_bad_inputs.py runs it."""
    try:
        code = importlib.import_module(module).main(argv)
    except SystemExit as stop:  # argparse's own errors
        code = stop.code
    return code, capsys.readouterr().err


def assert_cli_outcome(code: int, err: str) -> None:
    """Success, or exit 2 with exactly one ``tfapp: error:`` line and no traceback."""
    assert "Traceback" not in err, err[-3000:]
    if code == 0:
        return
    lines = err.strip().splitlines()
    assert code == 2, err[-3000:]
    assert lines and (lines[-1].startswith("tfapp: error: ") or "usage:" in err), err[-3000:]
    assert sum(line.startswith("tfapp: error:") for line in lines) <= 1, err[-3000:]


@fuzz(12)
@given(case=data_files(classifier=True))
def test_cli_prepare_of_generated_files(case, capsys, monkeypatch) -> None:
    name, body, _, mode = case
    TRIED["cli-prepare"] += 1
    monkeypatch.chdir(REPO)
    with _tmpdir() as tmp:
        path = tmp / name
        path.write_bytes(body)
        before = _hashes(path)
        code, err = run_cli("tfapp.prepare", [
            "--config", "configs/classifier_local.yaml", f"data.train_files={path}",
            f"data.on_bad_rows={mode}", "--out", str(tmp / "out"), "--split", "train"],
            capsys)
        assert_cli_outcome(code, err)
        assert _hashes(path) == before


@fuzz(20)
@given(case=config_cases())
def test_cli_print_config_of_generated_configs(case, capsys, monkeypatch) -> None:
    doc, overrides = case
    TRIED["cli-config"] += 1
    monkeypatch.chdir(REPO)
    with _tmpdir() as tmp:
        argv = ["--out", str(tmp / "out"), "--print-config", *overrides]
        if doc is not None:
            (tmp / "exp.yaml").write_bytes(doc)
            argv = ["--config", str(tmp / "exp.yaml"), *argv]
        code, err = run_cli("tfapp.prepare", argv, capsys)
        assert_cli_outcome(code, err)


def test_cli_predict_with_damaged_exports(export_dir, capsys) -> None:
    @fuzz(2, shrink=False)
    @given(damage(_export_files(export_dir)))
    def prop(changes) -> None:
        TRIED["cli-predict"] += 1
        with _tmpdir() as tmp:
            copy = _damaged_copy(export_dir, tmp / "export", changes)
            code, err = run_cli("tfapp.predict", ["--model", str(copy), "hello"], capsys)
            assert_cli_outcome(code, err)

    prop()

