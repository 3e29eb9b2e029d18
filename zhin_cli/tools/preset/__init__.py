"""``zhin preset lint|probe|check-capture``: SillyTavern presets checked and compared with captures."""
