"""Shards for `data=shards`: `python -m PACKAGE.prepare SRC DEST` (`invoke data.prepare`).

SRC is a `.npz` (arrays x, y) or a `.csv` (last column the label; prepared as a run prepares it,
fitted on the train split: data/preparation.py), or a folder of images with one sub-folder per
class (data/shards/samples.py); DEST a folder or an s3://, gs://, az:// prefix
(data/shards/writer.py writes it, index.json last).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .data.preparation import CHOICES, Options
from .data.shards.index import SPLITS
from .data.shards.writer import DEFAULT_SHARD_MB, prepare
from .data.splits import DataError


def main(argv: list[str] | None = None) -> None:
    from omegaconf import OmegaConf

    # The split every data config starts from (configs/ sits next to src/, as config/command.py
    # expects).
    defaults = OmegaConf.load(Path(__file__).resolve().parents[2] / "configs/data/_defaults.yaml")
    parser = argparse.ArgumentParser(prog="prepare", description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("dest")
    parser.add_argument("--shard-size", type=float, default=DEFAULT_SHARD_MB, metavar="MB")
    parser.add_argument("--image-size", default="", metavar="WxH")
    parser.add_argument("--val-fraction", type=float, default=defaults.val_fraction)
    parser.add_argument("--test-fraction", type=float, default=defaults.test_fraction)
    parser.add_argument("--split-seed", type=int, default=defaults.split_seed)
    parser.add_argument("--label", default=None, help="a .csv's label column (default: last)")
    parser.add_argument(
        "--header", default=None, choices=["yes", "no"],
        help="whether a .csv's first row names its columns (default: detected)",
    )  # fmt: skip
    for name, choices in CHOICES.items():
        parser.add_argument(
            f"--{name}", default=getattr(defaults, name), choices=choices,
            help=f"a .csv's {name} (data.{name}; default: %(default)s)",
        )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        size = _image_size(args.image_size)
        if args.shard_size <= 0:
            raise DataError(f"--shard-size {args.shard_size:g}: give a size in MB above 0")
        for flag, value in (("--val-fraction", args.val_fraction),
                            ("--test-fraction", args.test_fraction)):  # fmt: skip
            if not 0 < value < 1:
                raise DataError(f"{flag} {value:g}: give a fraction between 0 and 1")
        index = prepare(
            args.src,
            args.dest,
            shard_mb=args.shard_size,
            val_fraction=args.val_fraction,
            test_fraction=args.test_fraction,
            split_seed=args.split_seed,
            image_size=size,
            label=args.label,
            header=None if args.header is None else args.header == "yes",
            options=Options(args.missing, args.scaling, args.invalid),
        )
    except (DataError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    counts = {name: sum(s["rows"] for s in index["splits"][name]) for name in SPLITS}
    total = sum(len(index["splits"][name]) for name in SPLITS)
    print(
        f"prepared {args.dest}: {total} shards, "
        + ", ".join(f"{counts[name]} {name}" for name in SPLITS)
        + f", samples {'x'.join(map(str, index['layout']['shape']))} {index['layout']['dtype']}"
    )
    for line in index.get("summary", []):  # a .csv's columns, missing cells, classes
        print(line)
    skipped = index.get("skipped", [])
    if skipped:
        shown = ", ".join(skipped[:5]) + (", ..." if len(skipped) > 5 else "")
        print(f"skipped {len(skipped)} files that are not images: {shown}")
    print(f"train on it: invoke train -- data=shards data.source={args.dest}")


def _image_size(text: str) -> tuple[int, int] | None:
    if not text:
        return None
    width, _, height = text.lower().partition("x")
    if not (width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise DataError(f"--image-size {text!r}: give WIDTHxHEIGHT in pixels, as 224x224")
    return int(width), int(height)


if __name__ == "__main__":
    main()
