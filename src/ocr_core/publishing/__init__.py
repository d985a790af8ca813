"""Publishing a job's slice: where its rows stand, the dataset files, the card, the cost, each shard's own slice."""
