"""The generator's export behind ``tfapp.serving.ExportFormat``: its marker
(``generator.json``: the decoding settings it allows and defaults to), loading (the
SavedModel's ``generate``/``greedy``/``sample``/``beam_search``, which ``tfapp.generate``
calls) and the facts its model card shows. No TensorFlow at import.
"""

from __future__ import annotations

import os

from tfapp.serving import GENERATE, ExportedModel, ExportFormat, load_export


class LoadedGenerator(ExportedModel):
    """An exported generator: ``module`` decodes, ``metadata`` is its ``generator.json``."""

    def __init__(self, model: str | os.PathLike):
        super().__init__(*load_export(model, FORMAT))


class GeneratorExport(ExportFormat):
    task = "generator"
    marker = "generator.json"
    train_hint = "train with task=generator and trainer.export=true"
    serves = frozenset({GENERATE})

    def load(self, model: str | os.PathLike) -> LoadedGenerator:
        return LoadedGenerator(model)

    def describe(self, metadata: dict) -> dict[str, str]:
        """How the export decodes unless told otherwise (the card's limits say the prompt
        and length bounds)."""
        facts = {}
        defaults = metadata.get("defaults") or {}
        if defaults.get("method"):
            facts["decoding"] = (f"`{defaults['method']}` by default; greedy, sample, top_k, "
                                 f"top_p or beam search ({metadata.get('num_beams')} beams) "
                                 "on request")
        return facts


FORMAT = GeneratorExport()
