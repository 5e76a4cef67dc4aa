"""The root of a BERT task's serving export: what its serving functions read, and nothing
else.

A SavedModel holds what its root object tracks, and ``tf.saved_model.load`` rebuilds every
function it holds before the first prediction. Tracking the trained tf-keras model would
bring its optimizer (Adam's two slots per weight and its step counter: two thirds of a
classifier's export), its compiled metrics' state and the Keras metadata of every layer;
tracking the Hub preprocessor would bring every function it has (``__call__``, and
``bert_pack_inputs`` for each number of segments, with their assertions: three quarters of
a MiniLM classifier's functions, none of them called by ``serve``). So ``ServingModule``
tracks

* ``model_variables``: the weights the forward pass reads, each under its own name
  (``tfapp export-hf`` maps them by name);
* ``model``: that forward pass as one function, BERT features -> the model's output with
  ``training=False`` (the serving functions call it);
* ``preprocessor``: the preprocessor's state only: its lookup tables, assets and variables
  (``vocab_file`` and ``do_lower_case`` by name, which export-hf reads), not its functions;

and the subclasses add the serving functions and their own variables. Training state stays
in the run's checkpoints.
"""

from __future__ import annotations

from typing import Any

from tfapp.models.hub_encoder import BERT_INPUT_KEYS

import tensorflow as tf

#: the preprocessor attributes kept by name (``tfapp export-hf`` writes the tokenizer
#: from them)
TOKENIZER_FACTS = ("vocab_file", "do_lower_case")


def preprocessor_state(preprocessor: Any) -> tf.Module:
    """The lookup tables, assets and variables of a loaded Hub ``preprocessor`` (what its
    functions capture), without the functions; ``TOKENIZER_FACTS`` under their names."""
    state = tf.Module(name="preprocessor")
    keep = (tf.saved_model.experimental.TrackableResource, tf.saved_model.Asset, tf.Variable)
    state.resources = [obj for obj in tf.train.TrackableView(preprocessor).descendants()
                       if isinstance(obj, keep)]
    for name in TOKENIZER_FACTS:
        if getattr(preprocessor, name, None) is not None:
            setattr(state, name, getattr(preprocessor, name))
    return state


class ServingModule(tf.Module):
    """``model(features)``: the Keras ``model`` on ``{input_word_ids, input_mask,
    input_type_ids}`` (int32 ``[n, length]``), ``training=False``; ``tokenizer``: the Hub
    ``preprocessor`` whose ``tokenize`` and ``bert_pack_inputs`` the serving functions call
    (its state saved as ``preprocessor``)."""

    def __init__(self, model: tf.keras.Model, preprocessor: Any, *, name: str):
        super().__init__(name=name)
        spec = {k: tf.TensorSpec([None, None], tf.int32, name=k) for k in BERT_INPUT_KEYS}
        self.model = tf.function(lambda features: model(features, training=False),
                                 input_signature=[spec])
        # Exactly the variables the forward pass reads: not an accumulating model's
        # gradient accumulators, which are among the Keras model's variables too.
        self.model_variables = list(self.model.get_concrete_function().variables)
        self.preprocessor = preprocessor_state(preprocessor)
        # Called, not tracked (a lambda is no attribute tf.Module saves).
        self._tokenizer = lambda: preprocessor

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer()
