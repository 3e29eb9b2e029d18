"""Text from an input shown on a terminal or in a CI log: the one escaping function, and the mark of a difference.

Every string that comes from an input — a request body, a session id, a chat's ``integrity``, a lorebook comment,
a file name, a preset or entry name, a case name, a key — passes through :func:`terminal_safe` before zhin prints
it (on stdout, on stderr, in a table cell or an error line). zhin's own colours and line breaks are added around the
escaped text, never inside it.

What is escaped, each character written as its ``\\uXXXX`` escape (a backslash itself is left as is — the escape is
for a reader, not a round trip):

- controls a terminal acts on: C0 (ESC, CR, LF, TAB, BEL…), DEL and C1 (CSI ``\\x9b``, OSC ``\\x9d``…), so input can
  neither clear the screen, move the cursor, set the window title nor start a new line;
- line and paragraph separators (U+2028, U+2029), which some terminals and log viewers break lines at;
- the bidi controls — embeddings, overrides, isolates and the marks LRM, RLM, ALM — which reorder what a reviewer
  reads;
- invisible characters that hide or split text: the zero-width space, the word joiner and invisible operators
  (U+2060–2064), the deprecated format controls U+206A–206F and U+FEFF. The zero-width joiners (U+200C, U+200D) stay:
  emoji sequences and several scripts need them.

GitHub Actions workflow commands. The runner executes a line of stdout *or* stderr as a command when, after leading
white space, it starts with ``::name …::`` (``::error::``, ``::stop-commands::…``, ``::add-mask::``); and, in its
older form, wherever ``##[name …]`` appears in a line. With line breaks escaped, input text can begin a line only
where zhin puts it there (or a long line is wrapped), so the rule is: in input text the second ``:`` of each ``::``
is written ``\\u003a`` (``::error::x`` → ``:\\u003aerror:\\u003ax``, ``:::`` → ``:\\u003a:``) and the first ``#``
of ``##[`` is written ``\\u0023`` (``##[error]`` → ``\\u0023#[error]``). No line zhin prints can then start a workflow command from input
text, wherever the text sits and however the line is wrapped; single colons (``qq:group:1``, ``file.json:3``) stay
as they are. zhin's own annotations (``zhin_cli.core.ghactions``) are written by zhin at the start of a line on
purpose; the input text inside them goes through the same function before the runner's own %-escaping.

Rich markup in input (``[bold]``) is data too: :func:`markup_safe` is ``terminal_safe`` followed by rich's markup
escape, for text placed inside a markup string.
"""

from __future__ import annotations

import re

MARK = "⟦"  # printed just before the first character where two excerpts differ

# Cc (C0, DEL, C1), Zl, Zp, the bidi controls and the invisibles. A plain character class: one fast scan (a JSON
# document of 20 MB in 0.1 s when nothing matches); the two command openers are replaced as strings after it.
_RANGES_BUT_NEWLINE = (r"\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                       r"\u200b\u2060-\u2064\u206a-\u206f\ufeff")
_UNSAFE_CHARACTER = re.compile(f"[\n{_RANGES_BUT_NEWLINE}]")
_UNSAFE_BUT_NEWLINE = re.compile(f"[{_RANGES_BUT_NEWLINE}]")


def unsafe_character(character: str) -> bool:
    """A character a terminal would act on or hide: controls (C0, DEL, C1), line and paragraph separators, the bidi
    embeddings, overrides, isolates and marks (they reorder what follows them) and the invisibles listed above."""
    return _UNSAFE_CHARACTER.fullmatch(character) is not None


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _without_commands(text: str) -> str:
    # the second colon of each "::" (":::" → ":\u003a:", no "::" left) and the first "#" of "##["
    return text.replace("::", ":\\u003a").replace("##[", "\\u0023#[")


def terminal_safe(text: str) -> str:
    """``text`` with each unsafe character and each workflow-command opener written as its ``\\uXXXX`` escape, the
    rest as is (the module docstring says what and why)."""
    return _without_commands(_UNSAFE_CHARACTER.sub(_escaped, text))


def terminal_safe_lines(text: str) -> str:
    """``text`` escaped as ``terminal_safe`` does, its own line breaks (``\\n``) kept: a multi-line detail, or a JSON
    text zhin prints (``--json``, ``--show-request``) — there what is escaped can stand only inside a string, where
    ``\\uXXXX`` is the same character, so the document still parses to the same value."""
    return _without_commands(_UNSAFE_BUT_NEWLINE.sub(_escaped, text))


def markup_safe(text: str) -> str:
    """``terminal_safe(text)`` for a rich markup string: its ``[…]`` shown as typed, never read as a style."""
    from rich.markup import escape  # here: core is imported by commands that never print through rich

    return escape(terminal_safe(text))
