"""The generator's LM perplexity: each held-out token scored once, [END] and [UNK]
counted, on tiny fixed models whose value is known without the scoring code."""

import math

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.models import seq2seq
from tfapp.tasks.generator.export import TextGenerator
from tfapp.tasks.generator.scores import format_generator_report, generator_report
from tfapp.tasks.generator.serving import score_in_batches

import numpy as np
import pytest
import tensorflow as tf

VOCABULARY = ["", "[UNK]", "[START]", "[END]", "a", "b"]


def scores(model, context_words, target_words, texts):
    """The report of ``texts`` scored by the export's ``score`` function."""
    module = TextGenerator(model, VOCABULARY, context_words=context_words,
                           target_words=target_words)
    return generator_report(score_in_batches(module.score, texts))


def test_lm_perplexity_of_a_constant_model_is_the_hand_computed_value():
    # All weights 0 but the output bias ln(1, 1, 1, 2, 3, 4): whatever the context, the
    # model says p([UNK]) = 1/12, p([END]) = 2/12, p(a) = 3/12, p(b) = 4/12.
    model = seq2seq.Seq2Seq(len(VOCABULARY), embedding_dim=2, units=2, fused_lstm=False)
    model.build_for(2, 2)
    model.set_weights([np.zeros_like(w) for w in model.get_weights()])
    model.projection.bias.assign(np.log([1.0, 1, 1, 2, 3, 4]))
    # "a b a" -> a b a [END]; "b c" -> b [UNK] [END] ("c" is not in the vocabulary):
    # 7 tokens, each once, whatever the 2-token windows.
    report = scores(model, 2, 2, ["a b a", "B c!"])
    by_hand = 12 / (3 * 4 * 3 * 2 * 4 * 1 * 2) ** (1 / 7)  # 12 / 576^(1/7) = 4.8399...
    assert report["lm_tokens"] == 7
    assert report["lm_perplexity"] == pytest.approx(by_hand, rel=1e-5)
    assert report["lm_perplexity"] == pytest.approx(4.83989, rel=1e-5)
    # The window perplexity pools the targets of every window: 12 tokens, some twice.
    assert report["tokens"] == 12 and report["perplexity"] != pytest.approx(by_hand)
    assert format_generator_report(report).startswith("LM perplexity 4.8399  (")


def test_lm_perplexity_scores_each_token_from_its_left_context():
    """A random tiny model: the report equals the product of next-token probabilities
    stepped one token at a time (``encode`` + ``decode_step``): a line shorter than the
    target window from its whole prefix, a longer one in chunks of ``target_words``
    tokens, each chunk's encoder reading the ``context_words`` tokens before it."""
    tf.keras.utils.set_random_seed(3)
    model = seq2seq.Seq2Seq(len(VOCABULARY), embedding_dim=4, units=3, fused_lstm=False)
    context_words, target_words = 3, 4
    model.build_for(context_words, target_words)
    lines = {"a b": [4, 5], "b a a x b a b": [5, 4, 4, 1, 5, 4, 5]}
    report = scores(model, context_words, target_words, list(lines))

    log_p, tokens = 0.0, 0
    for ids in lines.values():
        ext = [2, *ids, 3]
        for chunk in range(0, len(ext) - 1, target_words):  # the chunk after ext[chunk]
            context = ext[max(0, chunk + 1 - context_words):chunk + 1]
            memory, keys, mask, state = model.encode(tf.constant([context]))
            previous = 2  # [START] opens every decoder target
            for token in ext[chunk + 1:chunk + 1 + target_words]:
                logits, state = model.decode_step(tf.constant([previous]), state, memory,
                                                  keys, mask)
                log_p += float(tf.nn.log_softmax(logits)[0, token])
                previous, tokens = token, tokens + 1
    assert tokens == 2 + 1 + 7 + 1 == report["lm_tokens"]
    assert report["lm_perplexity"] == pytest.approx(math.exp(-log_p / tokens), rel=1e-4)
