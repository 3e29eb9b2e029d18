"""Final review X1, the small ones: a ``ProviderSpec(...)`` missing an argument names ``ProviderSpec`` (not
``Capabilities``, the class's older name); ``RunContext.open`` takes a ``str`` cwd as well as a ``Path``.
Negative controls: a complete ``ProviderSpec(...)`` builds; a ``Path`` cwd opens as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zhin_cli.pipeline.providers import ProviderSpec


def test_a_missing_argument_names_provider_spec() -> None:
    with pytest.raises(TypeError, match=r"^ProviderSpec\.__init__\(\) missing 1 required positional argument: 'wire'"):
        ProviderSpec(name="w", mid_conversation_system="none")  # type: ignore[call-arg]
    assert ProviderSpec(name="w", wire="openai-chat", mid_conversation_system="none").name == "w"  # control


def test_run_context_takes_a_str_cwd(tmp_path: Path) -> None:
    from zhin_cli.pipeline.context import RunContext

    for cwd in (str(tmp_path), tmp_path):  # a str (was AttributeError) and a Path (control)
        with RunContext.open(None, cwd=cwd) as context:
            assert context.cwd == tmp_path and isinstance(context.cwd, Path)
