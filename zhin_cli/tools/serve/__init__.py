"""``zhin serve``: the local conformance server and its upstream relay."""
