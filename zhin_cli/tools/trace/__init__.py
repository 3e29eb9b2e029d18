"""``zhin trace``: replay a stored conversation request by request."""
