"""Corpus plugin: fails while its module is imported."""

raise RuntimeError("this plugin is broken at import time")
