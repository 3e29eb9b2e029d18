"""Corpus plugin: calls ``sys.exit`` while imported (must not end zhin with the plugin's exit code)."""

import sys

sys.exit(5)
