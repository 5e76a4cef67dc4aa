"""Each task's adapter to the input path: what an example of its data is (how a chunk of
prepared rows is read and encoded), its label or tag vocabulary and its counts."""
