"""``zhin stats cache``: prompt-cache hit rates from logged usage."""
