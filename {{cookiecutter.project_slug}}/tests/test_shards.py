"""Shards (`data=shards`): prepared from a file or a folder of images, streamed in an order fixed by
(seed, epoch) that ranks and loader workers split without overlap, resumable batch by batch, from
a folder or a bucket (the local S3 endpoint here); a bad shard is refused by name."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from cloudgpu.testing import services
from conftest import SHORT, invoke_cli, project_env, read_metrics, run_module, train
from helpers.datasets import SPLIT, numbered_shards, numbers

from {{ cookiecutter.package_name }}.data.shards import cache
from {{ cookiecutter.package_name }}.data.shards.cache import ShardReader, sha256_of
from {{ cookiecutter.package_name }}.data.shards.index import INDEX, SPLITS, Index, Shard, ShardError
from {{ cookiecutter.package_name }}.data.shards.stream import ShardSplit, load_splits
from {{ cookiecutter.package_name }}.data.shards.writer import prepare
from {{ cookiecutter.package_name }}.data.sources import load_arrays, readers
from {{ cookiecutter.package_name }}.data.splits import DataError, split
from {{ cookiecutter.package_name }}.data.uris import open_uri

BATCH = 4


def prepared(src: Path, dest: Path, shard_mb: float, **options: object) -> dict:
    return prepare(str(src), str(dest), shard_mb=shard_mb, **SPLIT, **options)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def ids(tmp_path_factory: pytest.TempPathFactory) -> ShardSplit:
    """203 samples whose one feature is their number; 7 per shard, blocks of 2 shards."""
    folder = tmp_path_factory.mktemp("ids")
    splits = load_splits(str(numbered_shards(folder)), 2, 1, str(folder / "cache"), 1.0)
    return splits.train  # type: ignore[return-value]


def loader(split: ShardSplit, workers: int, **options: object) -> list:
    """What a loader with `workers` workers hands out: each worker's batches, taken in turn
    (the framework tests check that their loaders do the same)."""
    made = [
        list(split.batches(BATCH, worker=w, workers=workers, **options)) for w in range(workers)
    ]  # type: ignore[arg-type]
    turns = [iter(batches) for batches in made]
    return [next(turns[w]) for w in loader_order([len(b) for b in made])]


def loader_order(counts: list[int]) -> Iterator[int]:
    """Which worker each batch comes from: one from each in turn, skipping the finished, as
    a DataLoader and tf.data's deterministic interleave do."""
    for turn in range(max(counts, default=0)):
        for worker, count in enumerate(counts):
            if count > turn:
                yield worker


def test_prepare_writes_checksummed_shards_and_the_split_data_files_makes(tmp_path: Path) -> None:
    x, y = load_arrays("builtin:digits")
    np.savez(tmp_path / "digits.npz", x=x, y=y)
    index = prepared(tmp_path / "digits.npz", tmp_path / "out", shard_mb=0.02)
    root = tmp_path / "out"
    assert json.loads((root / INDEX).read_text()) == index
    in_memory = split(x, y, *SPLIT.values())
    for name in SPLITS:
        listed = index["splits"][name]
        assert len(listed) > 1, "several shards per split"
        for shard in listed:
            path = root / shard["file"]
            assert path.stat().st_size == shard["bytes"]
            assert sha256_of(path) == shard["sha256"]
        streamed = load_splits(str(root), 4, 0, str(tmp_path / "c"), 1.0)
        got = np.concatenate([x for x, _ in getattr(streamed, name).batches(64)])
        want = getattr(in_memory, name).x
        # The same samples as data=files on the file, in the split's own order.
        assert got.shape == want.shape and np.array_equal(got, want)
    assert index["layout"] == {"shape": [1, 8, 8], "dtype": "float32", "scale": 1.0}


def test_an_epoch_is_every_sample_once_in_an_order_of_seed_and_epoch(
    ids: ShardSplit,
) -> None:
    epoch0 = numbers(list(ids.batches(BATCH, epoch=0, seed=7, shuffle=True)))
    assert sorted(epoch0) == sorted(numbers(list(ids.batches(BATCH))))
    assert len(epoch0) == len(ids) == len(set(epoch0))
    assert epoch0 == numbers(list(ids.batches(BATCH, epoch=0, seed=7, shuffle=True)))
    assert epoch0 != numbers(list(ids.batches(BATCH, epoch=1, seed=7, shuffle=True)))
    assert epoch0 != numbers(list(ids.batches(BATCH, epoch=0, seed=8, shuffle=True)))
    assert epoch0 != sorted(epoch0)


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("workers", [1, 3])
def test_ranks_and_workers_split_an_epoch_without_overlap(
    ids: ShardSplit, world: int, workers: int
) -> None:
    order = numbers(list(ids.batches(BATCH, epoch=2, seed=7, shuffle=True)))
    seen = []
    for rank in range(world):
        got = loader(ids, workers, epoch=2, seed=7, shuffle=True, rank=rank, world=world, even=True)
        # A rank reads a contiguous part of the epoch's order, in order, whatever its workers.
        per = len(ids) // world
        assert numbers(got) == order[rank * per : (rank + 1) * per]
        seen += numbers(got)
    assert len(seen) == len(set(seen)) == (len(ids) // world) * world
    # Uneven, as evaluation reads: every sample once over the ranks, the tail too.
    scored = [n for r in range(world) for n in numbers(loader(ids, workers, rank=r, world=world))]
    assert sorted(scored) == sorted(order)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_resume_skips_exactly_the_batches_already_trained_on(
    ids: ShardSplit, workers: int
) -> None:
    options = {"epoch": 1, "seed": 3, "shuffle": True}
    full = numbers(loader(ids, workers, **options))
    batches = len(loader(ids, workers, **options))
    for done in (1, 2, 5, 11, batches - 1):
        rest = numbers(loader(ids, workers, skip_batches=done, **options))
        assert rest == full[done * BATCH :], done


@pytest.mark.parametrize(
    ("cores", "local_processes", "expected"),
    [(2, 1, 1), (16, 1, 15), (16, 2, 7), (64, 8, 7), (96, 1, 16), (4, 8, 1)],
)
def test_auto_readers_share_the_cores_among_a_machines_training_processes(
    monkeypatch: pytest.MonkeyPatch, cores: int, local_processes: int, expected: int
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(cores)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_processes))
    assert readers("auto") == expected
    assert readers(3) == 3  # a number is taken as it is


def test_a_rank_reads_only_the_shards_of_its_part(
    ids: ShardSplit, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[str] = []
    original = ShardReader.read

    def counted(self: ShardReader, shard: Shard) -> tuple:
        read.append(shard.file)
        return original(self, shard)

    monkeypatch.setattr(ShardReader, "read", counted)
    list(ids.batches(BATCH, epoch=0, seed=1, shuffle=True, rank=0, world=3, even=True))
    # A third of the shards, plus the blocks (2 shards) where its part begins and ends.
    assert len(set(read)) <= len(ids.shards) // 3 + 4, read
    assert len(read) == len(set(read)), "each shard read once per epoch"


def test_bucket_faults_are_retried_and_bad_shards_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    np.savez(tmp_path / "d.npz", x=np.ones((40, 3), np.float32), y=np.arange(40) % 2)
    prepared(tmp_path / "d.npz", tmp_path / "local", 1e-4)
    # fsspec's in-memory filesystem stands in for a bucket: the reader fetches into its cache.
    prepare(str(tmp_path / "d.npz"), "memory://bucket/d", shard_mb=1e-4, **SPLIT)
    split_ = load_splits("memory://bucket/d", 2, 0, str(tmp_path / "cache"), 1.0).train
    shard = split_.shards[0]  # type: ignore[union-attr]
    real_open, failures = open_uri, []

    def flaky(uri: str, mode: str = "rb") -> object:
        if uri.endswith(".parquet") and len(failures) < 2:
            failures.append(uri)
            raise ConnectionError("connection reset by peer")
        return real_open(uri, mode)

    monkeypatch.setattr(cache, "open_uri", flaky)
    monkeypatch.setattr(cache, "BACKOFF_S", 0.01)
    reader = split_.reader()
    x, _ = reader.read(shard)
    assert len(failures) == 2 and len(x) == shard.rows  # two faults, then the shard

    def down(uri: str, mode: str = "rb") -> object:
        raise TimeoutError("timed out")

    monkeypatch.setattr(cache, "open_uri", down)
    second = split_.shards[1]  # type: ignore[union-attr]
    with pytest.raises(ShardError, match=f"shard memory://bucket/d/{second.file}: timed"):
        reader.read(second)
    monkeypatch.setattr(cache, "open_uri", real_open)

    local = load_splits(str(tmp_path / "local"), 2, 0, str(tmp_path / "c2"), 1.0).train
    files = [tmp_path / "local" / s.file for s in local.shards]  # type: ignore[union-attr]
    files[0].write_bytes(files[0].read_bytes()[:-10])
    data = bytearray(files[1].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[1].write_bytes(bytes(data))
    files[2].unlink()
    messages = {
        0: "bytes, the index says",
        1: "fails its sha256 check",
        2: "is missing (the index lists it)",
    }
    for number, message in messages.items():
        with pytest.raises(ShardError, match=re.escape(message)) as caught:
            local.reader().read(local.shards[number])  # type: ignore[union-attr]
        assert str(files[number].relative_to(tmp_path / "local")) in str(caught.value)


@pytest.mark.slow
def test_training_on_a_damaged_shard_stops_with_one_line(tmp_path: Path) -> None:
    x, y = load_arrays("builtin:digits")
    np.savez(tmp_path / "digits.npz", x=x, y=y)
    prepared(tmp_path / "digits.npz", tmp_path / "shards", shard_mb=0.02)
    target = next((tmp_path / "shards" / "train").iterdir())
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    done = run_module(
        "train", *SHORT, "data=shards", f"data.source={tmp_path / 'shards'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert done.returncode == 2, done.stdout
    errors = [line for line in done.stdout.splitlines() if line.startswith("error:")]
    assert errors and "fails its sha256 check" in errors[-1] and target.name in errors[-1], (
        done.stdout
    )
    assert "Traceback" not in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.npz", "out"], "data source not found: 'missing.npz'"),
        (["d.npz", "out", "--shard-size", "0"], "--shard-size 0: give a size in MB above 0"),
        (["d.npz", "out", "--image-size", "12"], "--image-size '12': give WIDTHxHEIGHT"),
        (["d.npz", "taken"], "taken exists and is not empty"),
        (["d.txt", "out"], "give a .npz, a .csv or a folder of images"),
    ],
)
def test_data_prepare_refuses_bad_input_in_one_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    np.savez(tmp_path / "d.npz", x=np.ones((10, 2), np.float32), y=np.arange(10) % 2)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    paths = [str(tmp_path / a) if i < 2 else a for i, a in enumerate(args)]
    done = invoke_cli("data.prepare", *paths)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message.replace("missing.npz", str(tmp_path / "missing.npz")) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz", "taken"], "no staging left"


def image_folder(root: Path, sizes: list[tuple[int, int]]) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for number, (width, height) in enumerate(sizes):
            pixels = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / label / f"{number}.png")


@pytest.mark.slow
def test_a_folder_of_images_becomes_shards_and_trains(tmp_path: Path) -> None:
    image_folder(tmp_path / "mixed", [(10, 12), (10, 12), (9, 12), (10, 12)])
    done = invoke_cli("data.prepare", str(tmp_path / "mixed"), str(tmp_path / "bad"))
    assert done.returncode == 2 and "give --image-size WxH" in done.stderr, done.stderr
    assert "dog/2.png is 9x12" in done.stderr or "cat/2.png is 9x12" in done.stderr
    assert not (tmp_path / "bad").exists()
    image_folder(tmp_path / "pets", [(10, 12)] * 10)
    (tmp_path / "pets" / "cat" / "notes.txt").write_text("not an image")
    done = invoke_cli(
        "data.prepare", str(tmp_path / "pets"), str(tmp_path / "shards"), "--image-size", "8x6"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped 1 files that are not images: cat/notes.txt" in done.stdout
    index = json.loads((tmp_path / "shards" / INDEX).read_text())
    assert index["classes"] == ["cat", "dog"] and index["layout"]["shape"] == [3, 6, 8]
    assert index["layout"]["dtype"] == "uint8"
    train(tmp_path / "run", "debug=fast", "logger=jsonl", "data=shards",
          f"data.source={tmp_path / 'shards'}", "data.batch_size=4")  # fmt: skip
    assert read_metrics(tmp_path / "run")["epochs"] == 1


def test_a_csv_with_a_header_becomes_shards_that_say_how_it_was_prepared(tmp_path: Path) -> None:
    """data.prepare reports each column (type, encoding, missing cells and what was done) and
    the classes, and the index carries the preparation fitted on the train split."""
    rows = "".join(f"{'' if i % 10 == 3 else i / 10},{('red', 'blue')[i % 2]},"
                   f"{('cat', 'dog')[i % 2]}\n" for i in range(30))  # fmt: skip
    (tmp_path / "pets.csv").write_text("height,colour,species\n" + rows)
    done = invoke_cli("data.prepare", str(tmp_path / "pets.csv"), str(tmp_path / "shards"),
                      "--label", "species")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    said = "column height: numbers, standard scaling, 3 missing (filled with the train median"
    assert said in done.stdout
    assert "column colour: texts, 2 categories, one-hot, none missing" in done.stdout
    assert "classes: cat 15, dog 15" in done.stdout
    index = json.loads((tmp_path / "shards" / INDEX).read_text())
    assert index["classes"] == ["cat", "dog"] and index["layout"]["shape"] == [3]
    height, colour = index["preparation"]["columns"]
    assert height["kind"] == "number" and height["scale"] > 0 and 0 < height["fill"] < 3
    assert colour["categories"] == ["blue", "red"]


@pytest.fixture(scope="module")
def bucket() -> Iterator[dict[str, str]]:
    with services.moto_env() as moto_env:
        yield project_env(**moto_env)


@pytest.mark.needs("aws")
def test_prepare_push_and_train_from_a_bucket_with_a_small_cache(
    tmp_path: Path, bucket: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """data.prepare to a folder, data.push to the local S3 endpoint (the real AWS CLI), and
    training from there through a cache of three shards: the metrics of training from disk."""
    import s3fs

    for key, value in bucket.items():
        monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()
    s3 = s3fs.S3FileSystem()
    x, y = load_arrays("builtin:digits")
    np.savez(tmp_path / "digits.npz", x=x, y=y)
    local = tmp_path / "digits"
    done = invoke_cli(
        "data.prepare", str(tmp_path / "digits.npz"), str(local), "--shard-size", "0.02"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    settings = tmp_path / "cloud.toml"
    settings.write_text('[aws]\nregion = "us-east-1"\nbucket = "s3://shards-bucket"\n')
    env = bucket | {"CLOUD_SETTINGS": str(settings)}
    done = invoke_cli("data.push", str(local), "--cloud=aws", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    uri = re.search(r"data=shards data\.source=(\S+)", done.stdout).group(1)  # type: ignore[union-attr]
    assert uri.startswith("s3://shards-bucket/") and uri.endswith("/data/digits")
    assert sorted(Path(p).name for p in s3.ls(uri)) == sorted(p.name for p in local.iterdir())
    cache, limit = tmp_path / "cache", 60_000  # three of the ~20 kB shards
    streamed = [
        "data=shards", f"data.source={uri}", f"data.shards.cache_dir={cache}",
        f"data.shards.cache_gb={limit / 1e9}",
    ]  # fmt: skip
    train(tmp_path / "from-bucket", *SHORT, *streamed, env=bucket)
    train(tmp_path / "from-disk", *SHORT, "data=shards", f"data.source={local}")
    assert (
        read_metrics(tmp_path / "from-bucket")["test/loss"]
        == read_metrics(tmp_path / "from-disk")["test/loss"]
    )
    kept = [p.stat().st_size for p in cache.rglob("*.parquet")]
    assert 0 < sum(kept) <= limit + max(kept), kept


@pytest.mark.needs("aws")
def test_prepare_writes_straight_to_a_bucket_once(
    tmp_path: Path, bucket: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    for key, value in bucket.items():
        monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()
    s3fs.S3FileSystem().mkdir("prepared-bucket")
    x, y = load_arrays("builtin:digits")
    np.savez(tmp_path / "digits.npz", x=x, y=y)
    uri, npz = "s3://prepared-bucket/digits", str(tmp_path / "digits.npz")
    done = invoke_cli("data.prepare", npz, uri, "--shard-size", "0.02", env=bucket)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"data=shards data.source={uri}" in done.stdout
    local = prepared(tmp_path / "digits.npz", tmp_path / "local", 0.02)
    assert Index.read(uri).splits == Index.read(str(tmp_path / "local")).splits
    assert local["splits"]["train"]
    done = invoke_cli("data.prepare", npz, uri, env=bucket)
    assert done.returncode == 2 and "already holds a prepared dataset" in done.stderr


@pytest.mark.parametrize(
    ("module", "data", "source", "message"),
    [
        ("train", "shards", "d.npz", "no index.json there; make one with `invoke data.prepare SRC"),
        ("crossval", "shards", "p", "crossval reads its data whole and data=shards streams it"),
        ("train", "files", "p", "is a prepared dataset (shards): train on it with data=shards"),
        ("train", "files", "gone.npz", "gone.npz: no such file"),
    ],
)
def test_data_that_cannot_be_read_is_refused_before_a_run(
    tmp_path: Path, module: str, data: str, source: str, message: str
) -> None:
    np.savez(tmp_path / "d.npz", x=np.ones((10, 2), np.float32), y=np.arange(10) % 2)
    prepared(tmp_path / "d.npz", tmp_path / "p", 1e-4)
    run_dir = tmp_path / "run"
    overrides = [f"data={data}", f"data.source={tmp_path / source}", f"hydra.run.dir={run_dir}"]
    done = run_module(module, *SHORT, *overrides)
    assert done.returncode == 2, done.stdout
    assert message in done.stdout and "Traceback" not in done.stdout, done.stdout
    assert not run_dir.exists()


@pytest.mark.parametrize("name", ["/etc/cron.d/evil.parquet", "../../outside.parquet",
                                  "train/../../../x.parquet", "train/a b.sh"])  # fmt: skip
def test_an_index_naming_files_outside_its_dataset_is_refused(tmp_path: Path, name: str) -> None:
    """Shard names come from index.json, which a bucket's writer controls: joined unchecked onto
    the cache folder they would write anywhere. Refused in one line, before anything is read."""
    np.savez(tmp_path / "d.npz", x=np.zeros((30, 2), np.float32), y=np.arange(30) % 3)
    prepare(str(tmp_path / "d.npz"), str(tmp_path / "d"), **SPLIT)
    index = json.loads((tmp_path / "d" / INDEX).read_text())
    index["splits"]["train"][0]["file"] = name
    (tmp_path / "d" / INDEX).write_text(json.dumps(index))
    with pytest.raises(DataError, match=f"shard name {re.escape(repr(name))} is not a split's"):
        Index.read(str(tmp_path / "d"))
