"""The built-in providers, as data: each module here holds ``SPECS``, a tuple of ``ProviderSpec`` objects, and imports
nothing but ``providers.capabilities`` (plus its own model tables). ``providers.spec`` finds every module of this
package and registers its specs — adding a provider on an existing wire format is one module here, plus its price
rows in ``pipeline/prices.json`` under the spec's price key (``price_key``, or its name), so a built-in spec's
``prices`` is None. A plugin's provider brings its rows in its spec's ``prices`` field (or ``register_prices``)
instead. Nothing else lists providers (issue 32).
"""
