"""The BERT inputs setup of the tasks that fine-tune a TF-Hub encoder (classifier, NER).

``bert_setup(cfg)`` resolves ``model.hub_handle`` to its encoder and preprocessor (a
``model.hub_preprocessor`` wins over the one the module bundles) and builds the
preprocessing function for ``data.seq_length``; ``BertInputs`` is the ``Inputs`` that
carries the three on to the model, the export and the model card.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn
from tfapp.hub.handles import resolve_hub_handle
from tfapp.models.hub_encoder import built_encoder
from tfapp.training.task import Inputs

if TYPE_CHECKING:
    from tfapp.config import ExperimentConfig

__all__ = ["BertInputs", "BertSetup", "bert_setup", "hub_encoder_recompiles"]


class BertSetup(NamedTuple):
    """The resolved Hub handles and the preprocessing built on them (``BertInputs``'s
    fields: ``Inputs(..., **setup._asdict())``)."""

    preprocess: Any
    encoder_handle: str
    preprocessor_handle: str


def bert_setup(cfg: ExperimentConfig) -> BertSetup:
    """Resolve ``model.hub_handle`` / ``model.hub_preprocessor`` and build the BERT
    preprocessing function for ``data.seq_length``."""
    encoder, bundled_pre = resolve_hub_handle(cfg.model.hub_handle)
    preprocessor = cfg.model.hub_preprocessor or bundled_pre
    preprocess = make_bert_preprocess_fn(hub_preprocessor=preprocessor,
                                         seq_length=cfg.data.seq_length)
    return BertSetup(preprocess, encoder, preprocessor)


@dataclass
class BertInputs(Inputs):
    """``Inputs`` of a task that fine-tunes a TF-Hub BERT (``bert_setup``).

    Attributes:
      preprocess: the BERT preprocessing function (``make_bert_preprocess_fn``; its
        ``.module`` tokenises and packs).
      encoder_handle: the resolved encoder (``model.hub_handle``).
      preprocessor_handle: the resolved preprocessor.
    """

    preprocess: Any = None
    encoder_handle: str = ""
    preprocessor_handle: str = ""


def hub_encoder_recompiles(model: Any) -> bool:
    """The BERT tasks' ``recompiles_under_xla`` for their encoder: True when ``model``
    holds a restored TF-Hub SavedModel, which XLA recompiles at every fine-tuning step
    (docs/hub.md), False when it holds tfapp's native ``BertEncoder`` (compiles once).
    Before the model is built (None) the Hub layer is assumed: XLA stays off until the
    built model says otherwise, rather than recompiling every step."""
    if model is None:
        return True
    encoder = built_encoder(model)
    return encoder is None or encoder.kind == "hub"
