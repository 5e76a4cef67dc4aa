"""Every reader of user text splits records the way csv/json define them.

Lines end at "\\n" only (U+2028, \\x0c, \\x85, ... stay inside their record and line numbers
stay right), TSV has no quoting, a UTF-8 BOM is dropped, and undecodable bytes give one
``FILE:LINE: not valid UTF-8 text`` line -- for data files, generator corpora and pairs,
BERT vocab files, predict's ``--input`` and generate's prompts (files and stdin), config
YAML files and Hugging Face JSON files.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import sys

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp import cli, generate, predict
from tfapp.config import ClassifierDataConfig, ConfigError, load_config
from tfapp.data.examples import generator as tl
from tfapp.data.examples.classification import load_classification_splits, raw_batches
from tfapp.data.rows.bad_rows import BadRowReport
from tfapp.data.rows.read import read_texts
from tfapp.data.text.vocab import read_vocab
from tfapp.errors import DataError
from tfapp.hub.convert import read_hf_bert

import pytest
from conftest import prepared_rows

# Characters str.splitlines breaks at that csv and json keep inside a record.
IN_RECORD = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
BOM = "\ufeff".encode()
GENERATOR = ["task=generator", "model.kind=seq2seq"]
NOT_UTF8 = "not valid UTF-8 text (re-save the file as UTF-8)"


def not_utf8(path, line: int) -> str:
    """The pattern of the one message for undecodable bytes at ``path:line``."""
    return re.escape(f"{path}:{line}: {NOT_UTF8}")


def load(tmp_path, path, **kw):
    cfg = dataclasses.replace(ClassifierDataConfig(), train_files=str(path),
                              validation_split=0.0, **kw)
    return load_classification_splits(cfg, seed=1, label_vocab_path=tmp_path / "labels.json")


def texts(splits) -> list[str]:
    """The training texts of ``splits``, in file order (shards hold their rows permuted;
    each row's id is its source and line)."""
    rows = [(int(i), t.decode()) for b in raw_batches(splits, splits.train)
            for i, t in zip(b["id"], b["text"], strict=True)]
    return [t for _, t in sorted(rows)]


def stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


# ------------------------------------------------------------------ records and lines
@pytest.mark.parametrize("ch", IN_RECORD)
def test_csv_field_with_a_line_separator_character_is_one_row(tmp_path, ch):
    path = tmp_path / "a.csv"
    path.write_text(f"text,label\nbefore{ch}after,pos\n\"quoted{ch}too\",neg\n",
                    encoding="utf-8", newline="")
    splits = load(tmp_path, path)
    assert texts(splits) == [f"before{ch}after", f"quoted{ch}too"]


@pytest.mark.parametrize("ch", ["\u2028", "\u2029", "\x85"])
def test_jsonl_string_with_a_line_separator_is_one_record(tmp_path, ch):
    path = tmp_path / "a.jsonl"
    # ensure_ascii=False writes the character raw, as many JSON writers do.
    path.write_text(json.dumps({"text": f"one{ch}two", "label": "pos"}, ensure_ascii=False)
                    + "\n" + json.dumps({"text": "three", "label": "neg"}) + "\n",
                    encoding="utf-8", newline="")
    splits = load(tmp_path, path)
    assert texts(splits) == [f"one{ch}two", "three"]


@pytest.mark.parametrize("ch", IN_RECORD)
def test_text_line_with_a_line_separator_is_one_text(tmp_path, ch):
    path = tmp_path / "corpus.txt"
    path.write_bytes(f"one{ch}two\r\nthree\n".encode())
    assert read_texts(str(path)) == [f"one{ch}two", "three"]


def test_a_conll_corpus_gives_each_sentences_words_as_one_text(tmp_path):
    """build-bert --corpus and builtin:tiny-cased read a CoNLL file as its sentences (not
    as "word tag" lines); a line without a tag is a bad row at its own line."""
    path = tmp_path / "names.conll"
    path.write_text("-DOCSTART- O\n\nAnna B-PER\nBerg I-PER\nsings O\n\n\nOslo B-LOC\n",
                    encoding="utf-8")
    assert read_texts(str(path)) == ["Anna Berg sings", "Oslo"]
    path.write_text("Anna B-PER\n\nBerg\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:3: "):
        read_texts(str(path))


@pytest.mark.parametrize("name, body", [
    ("a.jsonl", '{"text": "x\u2028y", "label": "pos"}\n{"text": "z\u2029", "label": "neg"}\n'
                '{"text": "w", "label": "neg"}\n{broken\n'),
    ("a.txt", "__label__pos x\u2028y\n__label__neg z\x0c\n__label__neg w\nno label here\n"),
    ("a.csv", "text,label\nx\u2028y,pos\nz\x0c,neg\ntoo,many,fields\nw,neg\n"),
])
def test_bad_row_after_such_lines_has_its_own_line_number(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(body, encoding="utf-8", newline="")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:4: "):
        load(tmp_path, path)
    splits = load(tmp_path, path, on_bad_rows="skip")
    assert [b.line for b in splits.report.examples] == [4]
    assert splits.size(splits.train) == 3


def test_jsonl_raw_control_character_is_invalid_json_on_its_own_line(tmp_path):
    """A raw \\x0c inside a JSON string is not JSON (json escapes it as \\f); the record is
    refused where it is, and does not take its neighbours with it."""
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "a"}\n{"text": "b\x0cc"}\n{"text": "d"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: not valid JSON"):
        read_texts(str(path))
    report = BadRowReport()
    assert read_texts(str(path), mode="skip", report=report) == ["a", "d"]
    assert [b.line for b in report.examples] == [2]


# ------------------------------------------------------------------------------- TSV
def test_tsv_quote_is_just_a_character(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_text('text\tlabel\n"5 inch screen\tpos\nsays "hi"\tneg\n"quoted"\tpos\n'
                    'last\tneg\n', encoding="utf-8")
    splits = load(tmp_path, path)
    assert texts(splits) == ['"5 inch screen', 'says "hi"', '"quoted"', "last"]


def test_tsv_pairs_keep_quotes_and_name_the_tab_rule(tmp_path):
    cfg = load_config(None, [*GENERATOR, "data.example_shape=pairs", "data.source_column=q",
                             "data.target_column=a"]).data
    path = tmp_path / "p.tsv"
    path.write_text('q\ta\n"hello\tthere"\n"a\tb\tc"\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"p.tsv:3: has 3 field\(s\) but the header has 2 "
                                        r"\(a TSV field cannot hold a tab"):
        prepared_rows([path], tl.generator_rows(cfg), tmp_path)
    assert prepared_rows([path], tl.generator_rows(cfg), tmp_path, mode="skip") == [
        {"source": '"hello', "target": 'there"'}]


# ------------------------------------------------------------------------------- BOM
@pytest.mark.parametrize("name, body", [
    ("a.csv", "text,label\nx,pos\ny,neg\n"),
    ("a.tsv", "text\tlabel\nx\tpos\ny\tneg\n"),
    ("a.jsonl", '{"text": "x", "label": "pos"}\n{"text": "y", "label": "neg"}\n'),
    ("a.txt", "__label__pos x\n__label__neg y\n"),
])
def test_bom_is_dropped_for_every_format(tmp_path, name, body):
    path = tmp_path / name
    path.write_bytes(BOM + body.encode())
    splits = load(tmp_path, path)
    assert texts(splits) == ["x", "y"]
    assert splits.label_names == ["neg", "pos"]


def test_bom_is_dropped_from_a_corpus_text_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(BOM + b"first line\nsecond\n")
    assert read_texts(str(path)) == ["first line", "second"]


def test_bom_is_dropped_from_a_bert_vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(BOM + "[PAD]\n[UNK]\na\u2028b\r\nc\n".encode())
    assert read_vocab(path) == ["[PAD]", "[UNK]", "a\u2028b", "c"]


def test_prompts_file_and_stdin_drop_the_bom_and_split_on_newline_only(tmp_path, monkeypatch):
    path = tmp_path / "prompts.txt"
    path.write_bytes(BOM + "the baker\u2028at dawn\r\n\nthe miller\n".encode())
    args = cli.parse(generate.command, ["--model", "m", "--prompts-file", str(path)])
    assert generate.read_prompts(args) == ["the baker\u2028at dawn", "", "the miller"]
    stdin(monkeypatch, BOM + b"from stdin\nsecond\n")
    args = cli.parse(generate.command, ["--model", "m", "--prompt", "first", "-"])
    assert generate.read_prompts(args) == ["first", "from stdin", "second"]


def test_predict_input_file_and_stdin_drop_the_bom(tmp_path, monkeypatch):
    path = tmp_path / "texts.txt"
    path.write_bytes(BOM + b"great\x0cphone\r\n\n  broke  \n")
    assert predict.read_input(str(path)) == ["great\x0cphone", "broke"]
    stdin(monkeypatch, BOM + b"from stdin\n")
    assert predict.read_input("-") == ["from stdin"]


def test_stdin_with_no_bytes_beneath_or_closed(tmp_path, monkeypatch, capsys):
    """A text-only stream (IDE consoles replace sys.stdin with one) reads the same way; a
    closed stdin (sys.stdin is None) is one line, not an AttributeError."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("\ufeffone\u2028two\r\nthree\n"))
    assert predict.read_input("-") == ["one\u2028two", "three"]
    monkeypatch.setattr(sys, "stdin", None)
    assert predict.main(["--model", str(tmp_path), "--input", "-"]) == 2
    assert capsys.readouterr().err == ("tfapp: error: <stdin>: standard input is closed; give "
                                       "the texts another way\n")


# ------------------------------------------------------------------- undecodable bytes
def test_undecodable_bytes_in_a_generator_corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"good line\nbad \xff line\nanother good one\n")
    cfg = load_config(None, GENERATOR).data
    with pytest.raises(DataError, match="^" + not_utf8(path, 2) + r" \(fix the data, or set "
                                        r"data.on_bad_rows=skip"):
        prepared_rows([path], tl.generator_rows(cfg), tmp_path)
    assert prepared_rows([path], tl.generator_rows(cfg), tmp_path, mode="skip") == [
        {"text": "good line"}, {"text": "another good one"}]


def test_undecodable_bytes_in_a_pairs_file(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"source": "a", "target": "b"}\n{"source": "\xe9", "target": "c"}\n')
    cfg = load_config(None, [*GENERATOR, "data.example_shape=pairs"]).data
    with pytest.raises(DataError, match="^" + not_utf8(path, 2)):
        prepared_rows([path], tl.generator_rows(cfg), tmp_path)


def test_undecodable_bytes_in_a_bert_vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\n[UNK]\n\xc3(\n")
    with pytest.raises(DataError, match="^" + not_utf8(path, 3) + "$"):
        read_vocab(path)


def test_undecodable_bytes_in_a_prompts_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "prompts.txt"
    path.write_bytes(b"the baker\nthe \x80 miller\n")
    assert generate.main(["--model", str(tmp_path), "--prompts-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"tfapp: error: {path}:2: {NOT_UTF8}\n"


def test_undecodable_bytes_on_generate_stdin_is_one_line(tmp_path, monkeypatch, capsys):
    stdin(monkeypatch, b"ok\n\n\xfe\n")
    assert generate.main(["--model", str(tmp_path), "-"]) == 2
    assert capsys.readouterr().err == f"tfapp: error: <stdin>:3: {NOT_UTF8}\n"


def test_undecodable_bytes_on_predict_stdin_is_one_line(tmp_path, monkeypatch, capsys):
    stdin(monkeypatch, b"fine text\nnot \xff fine\n")
    assert predict.main(["--model", str(tmp_path), "--input", "-"]) == 2
    assert capsys.readouterr().err == f"tfapp: error: <stdin>:2: {NOT_UTF8}\n"


def test_undecodable_bytes_in_a_predict_input_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "texts.txt"
    path.write_bytes(b"\xef\xbb\xbffine\n\nbad \xc3\n")
    assert predict.main(["--model", str(tmp_path), "--input", str(path)]) == 2
    assert capsys.readouterr().err == f"tfapp: error: {path}:3: {NOT_UTF8}\n"


def test_undecodable_bytes_in_a_config_yaml_is_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"trainer:\n  epochs: 3  # caf\xe9\n")
    with pytest.raises(ConfigError, match="^" + not_utf8(path, 2) + "$"):
        load_config(path)


def test_hugging_face_config_json_with_a_bom_or_bad_bytes(tmp_path):
    config = {"model_type": "bert", "vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 1,
              "num_attention_heads": 1, "intermediate_size": 8}
    (tmp_path / "config.json").write_bytes(BOM + json.dumps(config).encode())
    with pytest.raises(ConfigError, match="has no vocab.txt"):  # config.json was read
        read_hf_bert(tmp_path)
    (tmp_path / "config.json").write_bytes(b'{"model_type": "b\xe9rt"}')
    with pytest.raises(ConfigError, match="^" + not_utf8(tmp_path / "config.json", 1) + "$"):
        read_hf_bert(tmp_path)
