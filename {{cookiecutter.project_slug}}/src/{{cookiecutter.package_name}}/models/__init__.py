"""Model definitions. Each takes `input_shape` and `num_classes` from the data, the rest from
`configs/model/`."""
