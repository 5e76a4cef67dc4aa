"""Text transforms the training input and the exports share: BERT and SentencePiece
preprocessing, WordPiece vocabularies, the generator's words, NER windows and tags,
masking and packing. Nothing here reads a data file."""
