"""The generator export's model card (``README.md`` beside the SavedModel)."""

from __future__ import annotations

from typing import Any

from tfapp.model_card import ModelCard, vocabulary_scripts
from tfapp.tasks.generator.scores import SUMMARY
from tfapp.training.callbacks import history_row


def generator_card(cfg: Any, layout: Any, inputs: Any, *, details: dict[str, str],
                   test: dict | None = None) -> ModelCard:
    """The export's model card: data, metrics of the best evaluation (and the test split),
    usage and limits."""
    d, m, g = cfg.data, cfg.model, cfg.generation
    best = layout.best()
    row = history_row(layout.history, best["epoch"]) if best else {}
    metrics = {split: {k.removeprefix("val_"): v for k, v in row.items()
                       if k.startswith("val_") == (split == "validation")}
               for split in ("train", "validation")} if row else {}
    if test:
        metrics["test"] = {k: test[k] for k in SUMMARY}
    examples = {"train": inputs.num_train_examples}
    if inputs.num_validation_examples:
        examples["validation"] = inputs.num_validation_examples
    if test:
        examples["test"] = test["examples"]
    demo = d.train_files.strip() == "demo"
    files = {"train": "the demo corpus shipped with tfapp" if demo else f"`{d.train_files}`",
             "validation": f"`{d.validation_files}`" if d.validation_files
             else f"{d.validation_split:g} of train (seeded)"}
    if test:
        files["test"] = (f"`{d.test_files}`" if d.test_files
                         else f"{d.test_split:g} of train (seeded)")
    usage = "\n".join([
        "```bash", 'python -m tfapp.generate --model PATH_TO_THIS_FOLDER "a prompt"', "```",
        "", "```python", "import tensorflow as tf", "",
        'model = tf.saved_model.load("PATH_TO_THIS_FOLDER")',
        'out = model.generate(tf.constant(["a prompt"]))  # also greedy, sample, '
        "beam_search", 'out["text"]  # [n] continuations', "```"])
    limits = [f"Reads the last {d.context_words} words of a prompt; writes at most "
              f"{g.max_length} words (generation.max_length; greedy/sample/beam_search "
              "take their own).",
              f"Vocabulary: the {len(inputs.vocabulary)} most frequent training words "
              f"(scripts: {vocabulary_scripts(inputs.vocabulary)}); other words read "
              "as unknown.",
              f"A {m.kind} model of {m.units} units trained on {inputs.num_train_examples} "
              "examples: it continues text in the style of its corpus, it does not "
              "know facts."]
    if test:
        limits.append("Metrics: test `lm_perplexity` scores each test token once, from the "
                      f"left context the model reads ({d.context_words} words, then its "
                      "own target so far), `[END]` counted and unknown words as `[UNK]`: "
                      "comparable with an n-gram model's perplexity over the same "
                      "vocabulary. `perplexity` is the window perplexity (Keras's "
                      "`val_perplexity`: a token counted once in each training window "
                      "that holds it).")
    return ModelCard(title=f"Text generator ({m.kind})", cfg=cfg, examples=examples,
                     files=files, details=details, metrics=metrics, best=best, usage=usage,
                     limits=limits)
