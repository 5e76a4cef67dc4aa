"""Token classification (named-entity recognition): a BERT encoder tags every word."""
