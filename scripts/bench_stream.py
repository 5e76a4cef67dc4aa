"""Training-stream benchmark: examples/s of one pass that merges 1, 4 or 8 shard files at
once (``tfapp.data.input.stream``: runs of ``merge_unit(block)`` rows from every file in a seeded
order, then shuffle blocks), against the same files read one after another in order
(``shuffle_buffer: 0``), the shape of the stream before passes merged their files.

    python scripts/bench_stream.py [--files 1,4,8] [--rows 50000] [--blocks 256,10000]
        [--rounds 3] [--json stream.json]

Shards are written by tfapp's own ``prepare`` from generated review-like CSV rows (one
source file per shard), and each example is parsed from its ``tf.train.Example`` (text,
labels, id, bucket) as the classifier's stream parses it; no tokenisation, so the number is
the stream's own ceiling. Rows alternate within one process (the machine is shared and
noisy); printed: median examples/s and the range per row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import tfapp  # noqa: E402,F401  (tf-keras before TensorFlow)


def write_sources(folder: Path, files: int, rows: int) -> list[str]:
    words = ("the plot was great but the acting felt weak and slow overall a fine film "
             "i loved every minute of this book camera hotel service").split()
    paths = []
    for f in range(files):
        path = folder / f"source{f}.csv"
        with open(path, "w") as fh:
            fh.write("text,label\n")
            for i in range(rows):
                n = 8 + (i * 7 + f) % 24
                text = " ".join(words[(i * 3 + k * 5 + f) % len(words)] for k in range(n))
                fh.write(f"{text},{'pos' if (i + f) % 2 else 'neg'}\n")
        paths.append(str(path))
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", default="1,4,8")
    p.add_argument("--rows", type=int, default=50_000, help="rows per shard file")
    p.add_argument("--blocks", default="256,10000", help="shuffle blocks of the merged rows")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--json", default="")
    a = p.parse_args(argv)

    from tfapp.data.input import stream
    from tfapp.data.input.plan import Source, partition
    from tfapp.data.prepare.builder import prepare
    from tfapp.data.rows.spec import RowSpec

    import tensorflow as tf

    spec = {"text": tf.io.FixedLenFeature([], tf.string),
            "labels": tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64),
            "id": tf.io.FixedLenFeature([], tf.int64),
            "bucket": tf.io.FixedLenFeature([], tf.int64)}

    def examples(file, index):
        del index
        return tf.data.TFRecordDataset(file).batch(1024).map(
            lambda r: {k: v for k, v in tf.io.parse_example(r, spec).items() if k != "labels"},
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    counts = [int(f) for f in a.files.split(",")]
    blocks = [int(b) for b in a.blocks.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        sources = write_sources(Path(tmp), max(counts), a.rows)
        manifest = prepare(sources, f"{tmp}/prepared", RowSpec("labelled"))
        rows = []
        for n in counts:
            source = Source("train", tuple(manifest.files()[:n]),
                                   tuple(manifest.counts()[:n]))
            part = partition(source, 0, 1, 0)
            for block in [0, *blocks]:
                name = (f"{n} file(s), in order (block 0)" if block == 0 else
                        f"{n} file(s), merged in runs of {stream.merge_unit(block)}, "
                        f"block {block}")
                ds = stream.training_stream(source, part, examples, seed=1, block=block,
                                            examples_per_pass=source.size)
                rows.append((name, ds.rebatch(a.batch, drop_remainder=True),
                             source.size // a.batch))
        iterators = {name: iter(ds) for name, ds, _ in rows}
        times: dict[str, list[float]] = {name: [] for name, _, _ in rows}
        for rnd in range(a.rounds + 1):  # the first round warms up (traces, opens files)
            for name, _, steps in rows:
                it = iterators[name]
                start = time.perf_counter()
                for _ in range(steps):
                    next(it)
                if rnd:
                    times[name].append(steps * a.batch / (time.perf_counter() - start))
        for name, _, _ in rows:
            rates = times[name]
            results.append({"row": name, "median": statistics.median(rates),
                            "min": min(rates), "max": max(rates)})
            print(f"{name:55} {statistics.median(rates):>9,.0f} ex/s "
                  f"({min(rates):,.0f} - {max(rates):,.0f})", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
