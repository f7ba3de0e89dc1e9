"""Evaluation runs and reports. Not implemented yet: a later issue fills this package."""
