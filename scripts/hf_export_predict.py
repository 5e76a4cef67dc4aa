"""Predictions of a `tfapp export-hf` checkpoint in transformers + PyTorch, as JSON.

Runs in an environment with torch and transformers and no TensorFlow (the peers venv):

    .venv-peers/bin/python scripts/hf_export_predict.py HF_DIR "a text" "another text"
    .venv-peers/bin/python scripts/hf_export_predict.py HF_DIR "a" "b" --pairs "a2" "b2"

Prints one JSON object: the library versions, the model class transformers chose, its
id2label, and per text the token ids and token type ids (tokenizer(texts[, pairs],
truncation=True): the export's model_max_length is the run's seq_length; the texts after
``--pairs`` are the second texts of a sentence-pair classifier) and the probabilities:
softmax over labels for a single-label classifier, sigmoid for multi-label, and per token
softmax for a tagger.
tests/test_export_hf.py compares them with tfapp's.
"""

from __future__ import annotations

import json
import sys

import torch
import transformers
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)


def main(argv: list[str]) -> int:
    path, texts, pairs = argv[0], argv[1:], None
    if "--pairs" in texts:
        at = texts.index("--pairs")
        texts, pairs = texts[:at], texts[at + 1:]
    config = AutoConfig.from_pretrained(path)
    token_task = config.architectures == ["BertForTokenClassification"]
    auto = AutoModelForTokenClassification if token_task else AutoModelForSequenceClassification
    # output_loading_info: a weight the checkpoint lacks would be initialised randomly;
    # report it so the caller can fail on it.
    model, info = auto.from_pretrained(path, output_loading_info=True)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    batch = tokenizer(texts, pairs, truncation=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    if config.problem_type == "multi_label_classification":
        probs = torch.sigmoid(logits)
    else:
        probs = torch.softmax(logits, dim=-1)
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    print(json.dumps({
        "torch": torch.__version__, "transformers": transformers.__version__,
        "model_class": type(model).__name__, "tokenizer_class": type(tokenizer).__name__,
        "missing_keys": sorted(info["missing_keys"]),
        "unexpected_keys": sorted(info["unexpected_keys"]),
        "id2label": {str(k): v for k, v in model.config.id2label.items()},
        "input_ids": [row[:n] for row, n in zip(batch["input_ids"].tolist(), lengths,
                                                 strict=True)],
        "token_type_ids": [row[:n] for row, n in zip(batch["token_type_ids"].tolist(),
                                                      lengths, strict=True)],
        "probabilities": [row[:n] if token_task else row
                          for row, n in zip(probs.tolist(), lengths, strict=True)],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
