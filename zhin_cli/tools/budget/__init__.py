"""``zhin budget check|update``: the fixed prompt cost against a committed budget."""
