"""Raw files -> prepared shards: the builder (sources in parallel, parts, cache and lock),
the manifest, the shard writers and the records they hold."""
