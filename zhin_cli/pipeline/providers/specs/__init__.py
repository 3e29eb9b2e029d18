"""The built-in providers, as data: each module here holds ``SPECS``, a tuple of ``ProviderSpec`` objects, and imports
nothing but ``providers.capabilities`` (plus its own model tables). ``providers.spec`` finds every module of this
package and registers its specs — adding a provider on an existing wire format is one module here (and its price
rows in ``pipeline/prices.json``); nothing else lists providers (issue 32).
"""
