"""One optimizer step: the rows that make it, the loss, DeepSpeed and the ranks, the trainable policy."""
