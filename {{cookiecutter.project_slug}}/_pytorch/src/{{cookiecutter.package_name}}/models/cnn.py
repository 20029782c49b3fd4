"""A small convolutional network for (channels, height, width) images."""

from __future__ import annotations

from torch import Tensor, nn


class SmallCNN(nn.Module):
    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        channels: tuple[int, ...] = (32, 64),
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if len(input_shape) != 3:
            raise ValueError(f"SmallCNN needs (channels, height, width) inputs, got {input_shape}")
        layers: list[nn.Module] = []
        in_channels = input_shape[0]
        for out_channels in channels:
            layers += [
                nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1),
                nn.BatchNorm2d(out_channels),
                nn.ReLU(),
            ]
            in_channels = out_channels
        layers += [
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(dropout),
            nn.Linear(in_channels, num_classes),
        ]
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
