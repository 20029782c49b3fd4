"""A small convolutional network for (channels, height, width) images, or (height, width)
ones of one channel (a grayscale .npz as it is)."""

from __future__ import annotations

from torch import Tensor, nn

from . import check_image_input


class SmallCNN(nn.Module):
    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        channels: tuple[int, ...] = (32, 64),
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.check_input(input_shape)
        self.one_channel = len(input_shape) == 2  # (height, width): a channel is added
        layers: list[nn.Module] = []
        in_channels = 1 if self.one_channel else input_shape[0]
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

    check_input = staticmethod(check_image_input)  # training/fit.py asks before the run starts

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x.unsqueeze(1) if self.one_channel else x)
