"""``zhin report economy|window|html`` and ``zhin view``: reports over stored sessions and captures."""
