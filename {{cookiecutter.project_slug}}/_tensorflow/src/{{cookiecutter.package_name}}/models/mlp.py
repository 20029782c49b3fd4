"""A multilayer perceptron over the flattened input."""

from __future__ import annotations

import keras


class MLP(keras.Model):
    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        hidden_sizes: tuple[int, ...] = (256, 128),
        dropout: float = 0.1,
    ) -> None:
        inputs = keras.Input(shape=tuple(input_shape))
        x = keras.layers.Flatten()(inputs)
        for hidden in hidden_sizes:
            x = keras.layers.Dense(hidden, activation="gelu")(x)
            x = keras.layers.Dropout(dropout)(x)
        # Logits in float32 even under a mixed-precision policy: a stable softmax and loss.
        outputs = keras.layers.Dense(num_classes, dtype="float32")(x)
        super().__init__(inputs=inputs, outputs=outputs, name="mlp")
