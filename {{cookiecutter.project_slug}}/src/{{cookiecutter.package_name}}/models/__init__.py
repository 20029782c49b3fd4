"""Model definitions. Each takes `input_shape` and `num_classes` from the data, the rest from
`configs/model/`."""


def check_image_input(input_shape: tuple[int, ...]) -> None:
    """A convolutional model's samples: (channels, height, width), or (height, width) of one
    channel. Other data stops the run in one line, before it writes anything."""
    from ..data.splits import DataError

    if len(input_shape) not in (2, 3):
        raise DataError(
            f"model=cnn takes images, samples of (channels, height, width) or (height, width); "
            f"this data's samples are {tuple(input_shape)}: choose model=mlp"
        )
