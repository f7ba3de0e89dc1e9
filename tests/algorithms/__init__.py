"""Tests of hargo_hpc.algorithms."""
