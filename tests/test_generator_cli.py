"""`python -m tfapp.generate`: user errors are one line with exit code 2; and the whole
path train (configs/generator_local.yaml) -> export -> generate from the command line."""

import json
import math

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp import generate
from tfapp.errors import ConfigError

import pytest
from conftest import REPO, clean_lines, run_tfapp


def one_line_error(proc, fragment):
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tfapp: error:")]
    assert len(lines) == 1 and fragment in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_run_dir_is_one_line_exit_2(tmp_path):
    proc = run_tfapp("tfapp.generate", ["--model", str(tmp_path / "nope"), "hi"])
    one_line_error(proc, "no such directory; give a generator run directory")


def test_errors_in_process(tmp_path, capsys):
    assert generate.main(["--model", str(tmp_path), "hello"]) == 2
    assert "no exported generator" in capsys.readouterr().err
    assert generate.main(["--model", str(tmp_path)]) == 2
    assert "no prompt given" in capsys.readouterr().err
    assert generate.main(["--model", str(tmp_path), "--prompts-file", "/no/such"]) == 2
    assert "--prompts-file: cannot read" in capsys.readouterr().err
    (tmp_path / "saved_model.pb").write_bytes(b"")
    assert generate.main(["--model", str(tmp_path), "x"]) == 2
    assert "not a tfapp generator export" in capsys.readouterr().err


@pytest.mark.slow
def test_train_then_generate_from_the_command_line(tmp_path, capsys):
    # A test file: the export is scored on it at the end of training, then by evaluate.
    corpus = (REPO / "tfapp" / "demo" / "generator_corpus.txt").read_text().splitlines()
    test_file = tmp_path / "test.txt"
    test_file.write_text("\n".join(["# a comment line data.drop_regex drops", *corpus[-40:],
                                    "!!!"]) + "\n")  # empty once punctuation is stripped
    train = run_tfapp("tfapp.train", ["--config", "configs/generator_local.yaml",
                                      f"output_dir={tmp_path}", f"data.test_files={test_file}"])
    assert train.returncode == 0, train.stderr[-3000:]
    run_dir = tmp_path / "generator_local"
    assert "exported model:  " + str(run_dir / "export") in train.stdout
    assert "sample (greedy): " in train.stdout
    assert (run_dir / "vocab.txt").is_file()
    # The samples in TensorBoard's Text tab: the untrained model's, then one per epoch, the
    # last the text the log line of epoch 2 shows for each prompt.
    import tensorflow as tf
    from tensorboard.backend.event_processing import event_accumulator as ea

    samples = ea.EventAccumulator(str(run_dir / "logs" / "samples"),
                                  size_guidance={ea.TENSORS: 0})
    samples.Reload()
    texts = samples.Tensors("generated_text")
    assert [e.step for e in texts] == [0, 1, 2]
    table = tf.make_ndarray(texts[-1].tensor_proto).item().decode().splitlines()
    assert table[0].startswith("| prompt | greedy continuation") and len(table) > 2
    logged = next(line for line in train.stderr.splitlines() if "epoch 2 samples: " in line)
    for row in table[2:]:
        prompt, text = (cell.strip() for cell in row.strip("|").split(" | "))
        assert text and f"{prompt if prompt != '(empty)' else ''!r} -> {text!r}" in logged

    # The test report: every window of the 40 lines (each has <= 30 words, so at most
    # 31 windows and 8 target tokens a window), pooled perplexity and token accuracy.
    report = json.loads((run_dir / "test_report.json").read_text())
    assert report["texts"] == 40 and 40 < report["examples"] <= 40 * 31
    assert report["examples"] < report["tokens"] <= 8 * report["examples"]
    vocabulary = (run_dir / "vocab.txt").read_text().splitlines()
    # better than a uniform guess over the vocabulary (its perplexity is the vocab size)
    assert 1 < report["perplexity"] < len(vocabulary) and 0 < report["token_accuracy"] < 1
    assert report["perplexity"] == pytest.approx(math.exp(report["cross_entropy"]))
    # ... and the LM perplexity: each of the 40 lines' words and [END]s scored once.
    words = sum(len(line.split()) for line in clean_lines(corpus[-40:]))
    assert report["lm_tokens"] == words + 40 < report["tokens"]
    assert 1 < report["lm_perplexity"] < len(vocabulary)
    assert "test report:\nLM perplexity " in train.stdout
    assert "\nwindow perplexity " in train.stdout
    # evaluate on the export reproduces it: the same examples scored by the same function.
    proc = run_tfapp("tfapp.evaluate", ["--model", str(run_dir), "--data",
                                        str(test_file), "--json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert got == pytest.approx(report), (got, report)
    proc = run_tfapp("tfapp.evaluate", ["--model", str(run_dir), "--data",
                                        str(test_file), "--format", "conll"])
    one_line_error(proc, "--format conll: CoNLL files hold tagged words")

    # Prompts from stdin, several samples each, JSON lines.
    proc = run_tfapp("tfapp.generate", [
        "--model", str(run_dir), "-", "--sampler", "top_k", "--k", "3", "--temperature",
        "0.8", "--num-samples", "2", "--seed", "1", "--json"], input="the baker\nat dawn\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["prompt"] for r in rows] == ["the baker"] * 2 + ["at dawn"] * 2
    assert all(r["text"].startswith(r["prompt"]) for r in rows)
    assert all(len(r["continuation"].split()) <= 12 for r in rows)

    # Beam search with the exported beam count; a different count or length is refused.
    assert generate.main(["--model", str(run_dir), "--method", "beam", "--num-beams", "2",
                          "--max-words", "5", "the miller", ""]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].startswith("the miller")
    # The Python API generates what the command prints, and checks the same settings.
    model = tfapp.load(run_dir)
    assert model.task == "generator"
    continuations = model.generate(["the miller", ""], method="beam", num_beams=2, max_length=5)
    assert [f"{p} {c}".strip() for p, c in zip(["the miller", ""], continuations,
                                                strict=True)] == out
    with pytest.raises(ConfigError, match="outside 1..12"):
        model.generate(["x"], max_length=99)
    with pytest.raises(ConfigError, match="does not predict"):
        model.predict(["x"])
    assert generate.main(["--model", str(run_dir), "--method", "beam", "--num-beams", "4",
                          "x"]) == 2
    assert "runs beam search with 2 beams" in capsys.readouterr().err
    assert generate.main(["--model", str(run_dir / "export"), "--max-length", "99", "x"]) == 2
    assert "outside 1..12" in capsys.readouterr().err

    # The model card names the weights' epoch and their validation perplexity, and its
    # Python snippet runs as written.
    card = (run_dir / "export" / "README.md").read_text()
    record = json.loads((run_dir / "checkpoints" / "best.json").read_text())
    assert f"* weights: epoch {record['epoch']}, the best `val_loss`" in card
    table = [[cell.strip() for cell in line.split("|")[1:-1]]
             for line in card.split("## Metrics")[1].split("\n\n")[1].splitlines()]
    rows = {row[0]: dict(zip(table[0], row, strict=True)) for row in table[2:]}
    assert abs(float(rows["validation"]["perplexity"]) - math.exp(record["value"])) < 0.05 * (
        math.exp(record["value"]))  # perplexity = exp(loss), averaged per batch by Keras
    assert rows["test"]["perplexity"] == f"{report['perplexity']:.4f}", rows
    assert rows["test"]["lm_perplexity"] == f"{report['lm_perplexity']:.4f}", rows
    snippet = card.split("```python\n")[1].split("```")[0]
    namespace: dict = {}
    exec(snippet.replace("PATH_TO_THIS_FOLDER", str(run_dir / "export")), namespace)  # noqa: S102
    assert namespace["out"]["text"].shape == (1,)
