"""A small convolutional network for (channels, height, width) images, or (height, width)
ones of one channel (a grayscale .npz as it is)."""

from __future__ import annotations

import keras

from . import check_image_input


class SmallCNN(keras.Model):
    check_input = staticmethod(check_image_input)  # training/fit.py asks before the run starts

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        channels: tuple[int, ...] = (32, 64),
        dropout: float = 0.1,
    ) -> None:
        self.check_input(input_shape)
        inputs = keras.Input(shape=tuple(input_shape))
        # The data is channels-first; Keras convolutions run channels-last.
        if len(input_shape) == 2:
            x = keras.layers.Reshape((*input_shape, 1))(inputs)
        else:
            x = keras.layers.Permute((2, 3, 1))(inputs)
        for filters in channels:
            x = keras.layers.Conv2D(filters, kernel_size=3, padding="same")(x)
            x = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x)
            x = keras.layers.ReLU()(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        x = keras.layers.Dropout(dropout)(x)
        # Logits in float32 even under a mixed-precision policy: a stable softmax and loss.
        outputs = keras.layers.Dense(num_classes, dtype="float32")(x)
        super().__init__(inputs=inputs, outputs=outputs, name="small_cnn")
