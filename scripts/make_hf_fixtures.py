"""Write the tiny Hugging Face checkpoints under tests/fixtures/hf/<family>/ that
tests/test_hub_convert_families.py converts, with PyTorch's outputs for a few texts.

Run it with an environment that has torch, transformers (and sentencepiece)::

    /work/main/.venv-peers/bin/python scripts/make_hf_fixtures.py

Each family's folder is a ``save_pretrained`` checkpoint (config.json, model.safetensors,
the tokenizer files) of a randomly initialised task model, a few units wide, plus
``expected.npz``: for ``TEXTS`` (one segment) and ``PAIRS`` (two), the HF tokenizer's
``input_ids``/``attention_mask`` padded to ``SEQ_LENGTH`` and the encoder's
``last_hidden_state`` (``*_pooled`` where the model has a pooler). CI needs no torch: it
converts the checkpoint with tfapp and compares against these arrays.

The weights are redrawn larger than transformers' init (std 0.02 makes every LayerNorm
an identity and GELU nearly linear, so a wrong epsilon or activation would not show).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hf"
SEQ_LENGTH = 24
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Multilingual BERT: cased, CJK characters split one per token, accents kept.
MBERT_VOCAB = SPECIALS + [
    ".", ",", "!", "?", "。", "，", "'", "-",
    "Hello", "hello", "world", "World", "The", "the", "is", "in", "and", "a",
    "café", "cafe", "naïve", "na", "##ive", "##ïve", "Mü", "##nchen", "München", "Stra", "##ße",
    "Paris", "Tokyo", "是", "日", "本", "的", "首", "都", "东", "京", "中", "文", "我", "爱",
    "Привет", "мир", "При", "##вет", "Ελλάδα", "über", "Über", "##s", "##ed", "##ing", "read",
    "book", "new", "York", "city", "big", "E", "##l", "##a", "español", "año", "niño", "Ö",
]
MBERT_TEXTS = ["Hello world!", "东京是日本的首都。", "Tokyo is the 首都 of 日本.",
               "Über München, café naïve.", "Привет мир, Ελλάδα!", "hello WORLD cafe",
               "niño año español Ö"]
MBERT_PAIRS = [("我爱东京", "I read a new book."), ("Hello Paris", "Straße in München")]

# English uncased WordPiece for DistilBERT and ELECTRA.
EN_VOCAB = SPECIALS + [
    ".", ",", "!", "?", "'", "-",
    "the", "a", "movie", "film", "was", "is", "great", "bad", "good", "i", "loved", "it",
    "not", "very", "boring", "plot", "actor", "##s", "##ed", "##ing", "##ly", "act",
    "love", "hate", "story", "and", "but", "this", "that", "really", "fun", "un", "##fun",
    "cafe", "new", "york", "watch", "end", "##less",
]
EN_TEXTS = ["The movie was great!", "I loved it, really.", "Boring plot, bad actors.",
            "Not very fun... endless", "Café in New York"]
EN_PAIRS = [("the film was good", "I hate the ending"), ("watching it", "unfun story")]


# XLM-RoBERTa: a SentencePiece model trained here on a few mixed-script sentences.
XLMR_CORPUS = ["The movie was great!", "I loved it, really.", "Boring plot, bad actors.",
               "东京是日本的首都。", "Über München, café naïve.", "Привет мир!", "Hello world",
               "the film was good and the story was fun", "Straße in München",
               "un film très bon", "ein sehr guter Film", "una película muy buena", "我爱东京",
               "hello again world"]
XLMR_SEQ_LENGTH = 32
XLMR_TEXTS = ["The movie was great!", "东京是日本的首都。", "Привет, München café!",
              "una película ☃ muy buena", "Hello", "ﬁlm ＡＢＣ"]  # NFKC: fi, ABC
XLMR_PAIRS = [("我爱东京", "the story was fun"), ("ein guter Film", "un film très bon")]


def _perturb(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name:
                fill = (1.0 if name.endswith("weight") else 0.0)
                p.copy_(fill + 0.3 * torch.randn(p.shape, generator=gen))
            elif "embeddings" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))


def _write_vocab(path: Path, vocab: list[str]) -> Path:
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return path


def _outputs(tok, base: torch.nn.Module, texts, pairs, type_ids: bool,
             seq_length: int) -> dict[str, np.ndarray]:
    out = {}
    for key, batch in (("texts", texts), ("pairs", pairs)):
        if key == "pairs":
            enc = tok([a for a, _ in batch], [b for _, b in batch], padding="max_length",
                      max_length=seq_length, return_tensors="pt")
        else:
            enc = tok(batch, padding="max_length", max_length=seq_length, return_tensors="pt")
        assert enc["attention_mask"][:, -1].eq(0).all(), f"{key}: SEQ_LENGTH too short"
        kwargs = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        if type_ids:
            kwargs["token_type_ids"] = enc["token_type_ids"]
        with torch.no_grad():
            res = base(**kwargs)
        out[f"{key}_input_ids"] = enc["input_ids"].numpy().astype(np.int32)
        out[f"{key}_attention_mask"] = enc["attention_mask"].numpy().astype(np.int32)
        if "token_type_ids" in enc:
            out[f"{key}_token_type_ids"] = enc["token_type_ids"].numpy().astype(np.int32)
        out[f"{key}_last_hidden_state"] = res.last_hidden_state.numpy().astype(np.float32)
        if getattr(res, "pooler_output", None) is not None:
            out[f"{key}_pooled"] = res.pooler_output.numpy().astype(np.float32)
    return out


def _save(family: str, model, tok, base, texts, pairs, *, type_ids: bool,
          seq_length: int = SEQ_LENGTH) -> Path:
    out = ROOT / family
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    arrays = _outputs(tok, base.eval(), texts, pairs, type_ids, seq_length)
    np.savez_compressed(out / "expected.npz", **arrays)
    (out / "texts.json").write_text(json.dumps(
        {"texts": texts, "pairs": pairs, "seq_length": seq_length},
        ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return out


def _report(out: Path) -> None:
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{out.name}: {size / 1024:.1f} KiB in {out}")


def multilingual_bert(tmp: Path) -> None:
    from transformers import BertConfig, BertModel, BertTokenizer

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(MBERT_VOCAB) + 2, hidden_size=16, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                     layer_norm_eps=1e-12, hidden_act="gelu")
    model = BertModel(cfg)
    _perturb(model, 1)
    tok = BertTokenizer(str(_write_vocab(tmp / "mbert_vocab.txt", MBERT_VOCAB)),
                        do_lower_case=False, tokenize_chinese_chars=True, strip_accents=None)
    _save("multilingual_bert", model, tok, model, MBERT_TEXTS, MBERT_PAIRS, type_ids=True)


def distilbert(tmp: Path) -> None:
    from transformers import (
        DistilBertConfig,
        DistilBertForSequenceClassification,
        DistilBertTokenizer,
    )

    torch.manual_seed(0)
    cfg = DistilBertConfig(vocab_size=len(EN_VOCAB), dim=16, n_layers=2, n_heads=2,
                           hidden_dim=32, max_position_embeddings=32, activation="gelu")
    model = DistilBertForSequenceClassification(cfg)
    _perturb(model, 2)
    tok = DistilBertTokenizer(str(_write_vocab(tmp / "en_vocab.txt", EN_VOCAB)),
                              do_lower_case=True)
    _save("distilbert", model, tok, model.distilbert, EN_TEXTS, EN_PAIRS, type_ids=False)


def electra(tmp: Path) -> None:
    from transformers import ElectraConfig, ElectraForPreTraining, ElectraTokenizer

    torch.manual_seed(0)
    cfg = ElectraConfig(vocab_size=len(EN_VOCAB), embedding_size=8, hidden_size=16,
                        num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=32, hidden_act="gelu", layer_norm_eps=1e-12)
    model = ElectraForPreTraining(cfg)  # the discriminator
    _perturb(model, 3)
    tok = ElectraTokenizer(str(_write_vocab(tmp / "en_vocab.txt", EN_VOCAB)),
                           do_lower_case=True)
    _save("electra", model, tok, model.electra, EN_TEXTS, EN_PAIRS, type_ids=True)


def xlm_roberta(tmp: Path) -> None:
    import io

    import sentencepiece as spm
    from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizer

    model_bytes = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(XLMR_CORPUS * 20), model_writer=model_bytes, vocab_size=120,
        model_type="unigram", character_coverage=1.0, hard_vocab_limit=False, unk_id=0,
        bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2)
    (tmp / "spm").mkdir()
    (tmp / "spm" / "sentencepiece.bpe.model").write_bytes(model_bytes.getvalue())
    tok = XLMRobertaTokenizer.from_pretrained(str(tmp / "spm"))
    torch.manual_seed(0)
    cfg = XLMRobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=32,
                           max_position_embeddings=XLMR_SEQ_LENGTH + 2, type_vocab_size=1,
                           pad_token_id=1, bos_token_id=0, eos_token_id=2,
                           layer_norm_eps=1e-5, hidden_act="gelu")
    model = XLMRobertaModel(cfg)  # with its pooler
    _perturb(model, 4)
    out = _save("xlm_roberta", model, tok, model, XLMR_TEXTS, XLMR_PAIRS, type_ids=False,
                seq_length=XLMR_SEQ_LENGTH)
    # transformers 5 saves only tokenizer.json; Hub repos have the SentencePiece model too,
    # which is what tfapp reads. tokenizer.json (330 KB: the NFKC table in base64) is left
    # out to keep the fixtures small; the ids it gave are in expected.npz.
    shutil.copyfile(tmp / "spm" / "sentencepiece.bpe.model", out / "sentencepiece.bpe.model")
    (out / "tokenizer.json").unlink()


FAMILIES = {"multilingual_bert": multilingual_bert, "distilbert": distilbert,
            "electra": electra, "xlm_roberta": xlm_roberta}


def main(argv: list[str]) -> None:
    import tempfile

    names = argv or list(FAMILIES)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            (Path(tmp) / name).mkdir()
            FAMILIES[name](Path(tmp) / name)
            _report(ROOT / name)


if __name__ == "__main__":
    main(sys.argv[1:])
