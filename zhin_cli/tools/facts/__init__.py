"""``zhin facts show|prune``: stored member and scene facts."""
