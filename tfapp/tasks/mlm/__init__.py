"""Masked-LM pretraining of a tfapp BERT module (``task: mlm``, ``python -m tfapp.pretrain``).

* ``config.py``: which config keys the task cannot honour (no TensorFlow import);
* ``task.py``: ``MaskedLMTask`` (corpus -> dynamic masking, BertMaskedLM, module export).

The masking is ``tfapp.data.text.masking``, the model ``tfapp.models.mlm``, the export
``tfapp.hub.export.export_bert_modules``.
"""
