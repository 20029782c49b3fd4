"""Datasets larger than memory: Parquet shards with an index, read as a stream (`data=shards`).

A prepared dataset (`invoke data.prepare SRC DEST`) is a folder or a bucket prefix:

    index.json           splits -> shards (rows, bytes, sha256), the sample's shape and dtype
    train/00000.parquet  columns x (one sample's bytes) and y (its label); val/, test/ alike

index.py reads the index, cache.py brings shards to this machine and checks them, stream.py
turns them into an epoch's batches, writer.py makes them (prepare.py is its command line).
"""
