"""Checkpoints: a consistent cut of every table, written by every node in parallel as plain
.npy files with a manifest (format), taken and restored collectively (collective)."""
