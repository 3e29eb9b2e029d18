"""``zhin prefix-diff`` and ``zhin request-diff``: where consecutive or two given requests differ."""
