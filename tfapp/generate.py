"""Write text with a trained generator: ``tfapp generate --model RUN_DIR PROMPT``.

Loads ``RUN_DIR/export`` (the SavedModel ``python -m tfapp.train --config
configs/generator.yaml`` writes) with ``tf.saved_model.load`` and prints one line per
prompt and sample: the prompt followed by its generated continuation.

    python -m tfapp.generate --model runs/generator "the baker" "the old fisherman"
    python -m tfapp.generate --model runs/generator --prompt "at dawn" --sampler top_k \\
        --k 5 --temperature 0.8 --max-words 20 --num-samples 3 --seed 1
    python -m tfapp.generate --model runs/generator --method beam --num-beams 4 "the miller"
    echo "the weaver" | python -m tfapp.generate --model runs/generator -
    python -m tfapp.generate --model runs/generator --data prompts.csv --keep id \\
        --output generated.parquet

With --data, prompts are read and written as ``predict --data`` reads and writes rows:
every row of the files (the run's text column, or --text-column;
plain text lines too), in batches, into part files that appear whole, resumed after a
kill, split among processes with --shard I/N. Each output row holds the kept columns,
the ``prompt`` and its ``continuation``.

Defaults (method, temperature, ...) are the run's ``generation`` config.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import cli, textio
from tfapp.config import ConfigError
from tfapp.serving import GENERATE
from tfapp.tasks import load_export
from tfapp.tasks.generator.serving import FORMAT, REPETITION, SETTINGS, takes_repetition

import click

METHODS = ("greedy", "sample", "top_k", "top_p", "beam")


def read_prompts(args: SimpleNamespace) -> list[str]:
    """The prompts of the flags, in order: --prompt, PROMPT ('-': stdin's lines), then
    --prompts-file (a file's lines; '-': stdin's). Every line is a prompt, blank ones too."""
    prompts = list(args.prompt)
    for item in args.prompts:
        prompts.extend(textio.stdin_lines() if item == "-" else [item])
    if args.prompts_file:
        if args.prompts_file == "-":
            prompts.extend(textio.stdin_lines())
        else:
            try:
                with open(args.prompts_file, "rb") as fh:
                    raw = fh.read()
            except OSError as err:
                raise ConfigError(f"--prompts-file: cannot read '{args.prompts_file}' "
                                  f"({err.strerror})") from None
            prompts.extend(textio.text_lines(raw, args.prompts_file))
    if not prompts:
        raise ConfigError("no prompt given; pass PROMPT arguments, --prompt TEXT, "
                          "--prompts-file FILE or '-' to read stdin")
    return prompts


def settings(args: SimpleNamespace, meta: dict) -> dict:
    """The run's defaults overridden by the flags, checked against what the export allows.
    An export written before repetition control decodes without it (its defaults lack
    the keys) and refuses a request for it."""
    s = {**REPETITION, **meta["defaults"]}
    for key in SETTINGS:
        if getattr(args, key, None) is not None:
            s[key] = getattr(args, key)
    if not 1 <= s["max_length"] <= meta["max_length"]:
        raise ConfigError(f"--max-length: {s['max_length']} is outside 1..{meta['max_length']}"
                          " (this export's generation.max_length; retrain or re-export with "
                          "a larger one)")
    if s["temperature"] <= 0:
        raise ConfigError(f"--temperature: {s['temperature']} must be > 0")
    if s["top_k"] < 1:
        raise ConfigError(f"--top-k: {s['top_k']} must be >= 1")
    if not 0 < s["top_p"] <= 1:
        raise ConfigError(f"--top-p: {s['top_p']} must be in (0, 1]")
    if s["length_penalty"] < 0:
        raise ConfigError(f"--length-penalty: {s['length_penalty']} must be >= 0")
    if s["no_repeat_ngram_size"] < 0:
        raise ConfigError(f"--no-repeat-ngram-size: {s['no_repeat_ngram_size']} must be >= 0 "
                          "(0 = off)")
    if s["repetition_penalty"] <= 0:
        raise ConfigError(f"--repetition-penalty: {s['repetition_penalty']} must be > 0 "
                          "(1 = off)")
    if args.num_samples < 1:
        raise ConfigError(f"--num-samples: {args.num_samples} must be >= 1")
    if s["method"] == "beam" and s["num_beams"] != meta["num_beams"]:
        raise ConfigError(f"--num-beams: this export runs beam search with {meta['num_beams']}"
                          f" beams, not {s['num_beams']}; retrain/re-export with "
                          f"generation.num_beams={s['num_beams']}")
    asked = [k for k, off in REPETITION.items() if s[k] != off]
    if asked and not takes_repetition(meta):
        raise ConfigError(f"--{asked[0].replace('_', '-')}: this generator export was written "
                          "before repetition control; leave it out, or export it again "
                          f"({FORMAT.train_hint})")
    return s


def generate(export: Any, prompts: Any, s: dict) -> list[str]:
    """Continuations for ``prompts`` (a list of strings or a string tensor ``[n]``),
    batched in one call of the function of ``export`` (a loaded generator export: its
    ``tf.saved_model.load``-ed ``module`` and its ``metadata``) that ``s`` asks for."""
    from tfapp.models.decoding import method_filters

    import tensorflow as tf

    loaded = export.module
    batch = tf.convert_to_tensor(prompts, tf.string)
    length = tf.constant(s["max_length"], tf.int32)
    # An export older than repetition control takes no such arguments (settings refused
    # a request for it).
    repetition = ([tf.constant(s["no_repeat_ngram_size"], tf.int32),
                   tf.constant(s["repetition_penalty"], tf.float32)]
                  if takes_repetition(export.metadata) else [])
    if s["method"] == "greedy":
        out = loaded.greedy(batch, length, *repetition)
    elif s["method"] == "beam":
        out = loaded.beam_search(batch, length, tf.constant(s["length_penalty"], tf.float32),
                                 *repetition)
    else:
        top_k, top_p = method_filters(s["method"], s["top_k"], s["top_p"])
        out = loaded.sample(batch, length, tf.constant(s["temperature"], tf.float32),
                            tf.constant(top_k, tf.int32), tf.constant(top_p, tf.float32),
                            tf.constant(s["seed"], tf.int32), *repetition)
    return [t.decode("utf-8") for t in out["text"].numpy()]


class Continuations:
    """A generator export behind ``predict_rows``, what ``tfapp.scoring`` calls: per
    prompt of a batch, ``{"prompt", "continuation"}`` decoded with the settings ``s``
    (``num_samples`` > 1: a list of that many continuations)."""

    text_pair = False
    output_columns = ("prompt", "continuation")

    def __init__(self, loaded: Any, s: dict, num_samples: int = 1):
        self.loaded, self.path, self.s, self.num_samples = loaded, loaded.path, s, num_samples

    def predict_rows(self, texts: Any, pairs: Any | None = None) -> list[dict]:
        import tensorflow as tf

        prompts = tf.convert_to_tensor(texts, tf.string)
        n = self.num_samples
        out = generate(self.loaded, tf.repeat(prompts, n) if n > 1 else prompts, self.s)
        given = [t.decode("utf-8") for t in prompts.numpy()]
        return [{"prompt": p, "continuation": out[i] if n == 1 else out[i * n:(i + 1) * n]}
                for i, p in enumerate(given)]


def _generate_data(args: SimpleNamespace) -> int:
    """``--data FILES --output OUT``: a continuation of every row's prompt into OUT."""
    from tfapp.scoring import output_flags, run_data, score_files

    if args.prompts or args.prompt or args.prompts_file or args.json:
        raise ConfigError("--data reads the prompts from files into --output; leave out the "
                          "PROMPT arguments, --prompt, --prompts-file and --json")
    shard, keep = output_flags(args)  # refusals before the model loads
    data = run_data(args.model)
    loaded = load_export(args.model, GENERATE)
    s = settings(args, loaded.metadata)
    pairs = loaded.metadata.get("example_shape") == "pairs"
    column = args.text_column or (getattr(data, "source_column", "source") if pairs
                                  else getattr(data, "text_column", "text"))
    # The settings are part of the job: a rerun with others would mix two outputs.
    return score_files(Continuations(loaded, s, args.num_samples), args, command="generate",
                       columns=[column], keep=keep, shard=shard, data=data,
                       job={"generation": {**s, "num_samples": args.num_samples}})


_DATA_FLAGS = {"data.text_column": "--text-column", "data.format": "--format",
               "data.on_bad_rows": "--on-bad-rows"}


@cli.command(
    "generate", __doc__,
    epilog="""Prompts: positional arguments, --prompt (repeatable), --prompts-file FILE (one per
    line), or '-' for stdin. An empty prompt asks for a line opening.""")
@click.argument("prompts", nargs=-1, metavar="[PROMPT]...")
@click.option("--model", required=True, metavar="RUN_DIR",
              help="Generator run directory (output_dir/name) or its export/ directory.")
@click.option("--prompt", multiple=True, metavar="TEXT", help="A prompt (repeatable).")
@click.option("--prompts-file", metavar="FILE", help="Prompts, one per line ('-' = stdin).")
@click.option("--method", "--sampler", "method", type=click.Choice(METHODS),
              help="Decoding method (default: the run's generation.method).")
@click.option("--temperature", type=float, help="Sampling temperature (> 0).")
@click.option("--top-k", "--k", "top_k", type=int, help="top_k: words to sample from.")
@click.option("--top-p", "--p", "top_p", type=float, help="top_p: nucleus mass.")
@click.option("--num-beams", type=int, help="beam: beams (must equal the exported one).")
@click.option("--length-penalty", type=float, help="beam: length penalty alpha (>= 0).")
@click.option("--max-length", "--max-words", "max_length", type=int,
              help="Most words generated per prompt.")
@click.option("--no-repeat-ngram-size", type=int,
              help="Never repeat an n-gram of this many words within a continuation "
                   "(0 = off; default: the run's generation.no_repeat_ngram_size).")
@click.option("--repetition-penalty", type=float,
              help="Divide a repeated word's positive logit by this, multiply a negative "
                   "one (1 = off; default: the run's generation.repetition_penalty).")
@click.option("--num-samples", "-n", type=int, default=1, show_default=True,
              help="Samples per prompt (different for sampling methods).")
@click.option("--seed", type=int, help="Seed of the sampler (same seed, same text).")
@click.option("--json", is_flag=True, help="Print JSON lines {prompt, continuation, text}.")
@click.option("--data", metavar="FILES",
              help="Prompts to continue: rows of files (path, glob, comma-joined, gs://), "
                   "written to --output.")
@click.option("--text-column", help="With --data: the prompts' column (default: the run's "
                                    "data.text_column; a pairs run's data.source_column).")
@cli.file_output_options(shard_verb="write",
                         batch_help="prompts read together (decoded 32 at a time)")
def command(args: SimpleNamespace) -> int:
    cli.check_file_output_counts(args)
    if args.data:
        try:
            return _generate_data(args)
        except ConfigError as err:
            raise err.in_flag_terms(_DATA_FLAGS) from None
    if args.output or args.keep:
        raise ConfigError("--output and --keep go with --data FILES (prompts read from "
                          "files); prompts given as arguments are printed")
    prompts = read_prompts(args)
    # The export that generates, by its marker (found before TensorFlow is imported).
    loaded = load_export(args.model, GENERATE)
    s = settings(args, loaded.metadata)
    batch = [p for p in prompts for _ in range(args.num_samples)]
    for prompt, cont in zip(batch, generate(loaded, batch, s), strict=True):
        text = f"{prompt.strip()} {cont}".strip()
        if args.json:
            print(json.dumps({"prompt": prompt, "continuation": cont, "text": text}))
        else:
            print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.generate")


if __name__ == "__main__":
    sys.exit(main())
