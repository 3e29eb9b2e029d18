"""What each command computes, as data, one folder per command (group): ``trace/`` (``zhin trace``), ``diff/``
(``prefix-diff``, ``request-diff``), ``report/`` (``report economy``/``window``/``html`` and ``view``), ``stats/``,
``serve/``, ``preset/`` (``preset lint``/``probe``/``check-capture``), ``budget/``, ``facts/``, ``fixtures/``,
``ci/`` (the GitHub Action) and ``eval/``. The CLI (``zhin_cli._cli``) prints what these return.

A folder imports no other tool folder: what two commands share lives a layer down (``zhin_cli.cache``:
serialisation, replay, the prefix-break engine, costs, usage, captures; ``pipeline.provenance``; ``store.refs``;
``core.textdiff``). Commands that compose share a folder (``report html`` draws ``report economy`` and
``report window``). tests/test_tool_folders.py holds the rule, and no folder past 12 modules.
"""
