"""The `/liger` grammar: pure functions, no server."""

from __future__ import annotations

import pytest
from hypothesis import assume
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from bot.commands import VERBS
from bot.commands import Command
from bot.commands import CommandError
from bot.commands import command_lines
from bot.commands import parse_comment
from bot.commands import parse_line
from bot.commands import render_help
from bot.forge.base import Permission


def test_autopatch_with_settings():
    command = parse_line("/liger autopatch Qwen3-Next --set rms_offset=1.0 --set=rope=none")
    assert command == Command("autopatch", "Qwen3-Next", ("rms_offset=1.0", "rope=none"))
    assert command.spec.pipeline == "autopatch" and command.spec.permission is Permission.WRITE


def test_quoted_json_setting_survives():
    command = parse_line("""/liger set 'norm_attrs={"decoder": ["input_layernorm"], "final": "norm"}'""")
    assert command.settings == ('norm_attrs={"decoder": ["input_layernorm"], "final": "norm"}',)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("/liger autopatch", "needs a model"),
        ("/liger autopatch --set rope=none", "needs a model"),
        ("/liger deploy prod", "is not a `/liger` command"),
        ("/liger set", "needs at least one field=value"),
        ("/liger set rope", "is not field=value"),
        ("/liger approve now", "does not take"),
        ("/liger autopatch llama --set", "needs field=value"),
        ("/liger autopatch 'llama", "could not read"),
        ("/liger autopatch /etc/passwd", "is not a model name"),
        ("/liger autopatch ..", "is not a model name"),
        ("/liger autopatch llama`id`", "is not a model name"),
    ],
)
def test_malformed_commands_are_refused_with_a_reason(line, message):
    with pytest.raises(CommandError, match=message.replace("`", ".").replace("(", ".")):
        parse_line(line)


def test_only_lines_outside_code_and_quotes_count():
    body = "\n".join(
        [
            "Thanks! Running it:",
            "/liger autopatch nemotron",
            "> /liger cancel",
            "```",
            "/liger cancel",
            "```",
            "`/liger cancel` would stop it",
            "<!-- /liger cancel -->",
            "  /liger status",
            "/ligerish",
        ]
    )
    assert command_lines(body) == ["/liger autopatch nemotron", "/liger status"]


def test_parse_comment_keeps_order_and_errors_and_caps_the_count():
    parsed = parse_comment("/liger set rope=none\n/liger nope\n/liger approve")
    assert parsed[0] == Command("set", None, ("rope=none",))
    assert isinstance(parsed[1], CommandError) and parsed[2] == Command("approve")
    assert len(parse_comment("\n".join(["/liger status"] * 50))) == 5


def test_help_lists_every_verb_from_the_table():
    text = render_help()
    for verb in VERBS:
        assert f"`/liger {verb}" in text
    assert "| `/liger status` | show where this thread's job stands | anyone |" in text


def test_bare_prefix_is_help_and_command_text_round_trips():
    assert parse_line("/liger") == Command("help")
    command = parse_line("/liger autopatch nemotron --set mlp_kind=geglu")
    assert parse_line(command.text()) == command
    forced = parse_line("/liger kernel relu2 --force")
    assert forced.text() == "/liger kernel relu2 --force" and parse_line(forced.text()) == forced


def test_kernel_and_fuse_are_rows_of_the_table_with_help_and_permission():
    text = render_help()
    assert (
        "| `/liger kernel SPEC [--name NAME] [--force]` |" in text
        and "| `/liger fuse path/in/repo.py:Factory` |" in text
    )
    for verb in ("kernel", "fuse"):
        assert VERBS[verb].pipeline == verb and VERBS[verb].permission is Permission.WRITE
    row = next(line for line in text.splitlines() if line.startswith("| `/liger kernel"))
    assert row.endswith("| write access or higher |")


@pytest.mark.parametrize(
    ("line", "command"),
    [
        ("/liger kernel relu2", Command("kernel", "relu2")),
        ("/liger kernel relu2 --name relu_sq", Command("kernel", "relu2", options=(("name", "relu_sq"),))),
        ("/liger kernel relu2 --name=relu_sq", Command("kernel", "relu2", options=(("name", "relu_sq"),))),
        ("/liger kernel relu2 --force", Command("kernel", "relu2", options=(("force", "yes"),))),
        ("/liger kernel relu2 --force --name n", Command("kernel", "relu2", options=(("force", "yes"), ("name", "n")))),
        (
            "/liger kernel test/transformers/test_rms_norm.py:LlamaRMSNorm",
            Command("kernel", "test/transformers/test_rms_norm.py:LlamaRMSNorm"),
        ),
        ("/liger fuse examples/recsys.py:make_model", Command("fuse", "examples/recsys.py:make_model")),
    ],
)
def test_kernel_and_fuse_commands(line, command):
    assert parse_line(line) == command
    assert parse_line(command.text()) == command


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("/liger kernel", "needs a kernel spec"),
        ("/liger kernel ../../etc/passwd.py:f", "is not .path/in/repo.py:function"),
        ("/liger kernel /abs/op.py:f", "is not .path/in/repo.py:function"),
        ("/liger kernel Relu2;rm", "is not a kernel spec"),
        ("/liger kernel relu2 --name ../x", "is not a kernel name"),
        ("/liger kernel relu2 --force=yes", "takes no value"),
        ("/liger autopatch arcee --force", "does not take"),
        ("/liger kernel relu2 --name", "needs a value"),
        ("/liger kernel relu2 --set a=b", "does not take"),
        ("/liger fuse examples/recsys.py", "is not .path/in/repo.py:Factory"),
        ("/liger fuse -x.py:make", "is not .path/in/repo.py:Factory"),
        ("/liger fuse examples/" + "a" * 120 + ".py:make", "at most 100 characters"),
        ("/liger autopatch llama --name x", "does not take"),
    ],
)
def test_kernel_and_fuse_refusals(line, message):
    with pytest.raises(CommandError, match=message):
        parse_line(line)


# --- red team, finding 4: a quote-reply that starts an outsider's command -------------------------------------

# What str.splitlines() breaks on and GitHub's Markdown does not: a `> ` quote covers the whole line they sit in.
NOT_LINE_ENDS = ("\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\r")


@pytest.mark.parametrize("separator", NOT_LINE_ENDS, ids=[f"U+{ord(c):04X}" for c in NOT_LINE_ENDS])
def test_a_quote_reply_cannot_start_a_command_through_a_separator_github_does_not_break_on(separator):
    outsider = f"thanks!{separator}/liger autopatch llama --set rope=none"
    quote_reply = "\n".join("> " + line for line in outsider.split("\n")) + "\n\nLooks good to me."
    assert parse_comment(quote_reply) == []
    assert command_lines(f"{separator}/liger approve") == []  # not whitespace to CommonMark: not a command line


@pytest.mark.parametrize(
    "body",
    [
        "> quoted by the maintainer\n/liger approve",  # lazy continuation: GitHub renders it inside the quote
        "> a\n> b\ncontinued\n/liger approve",
        "- > quoted in a list\n  /liger approve",
        "<details>\n<summary>log</summary>\n\n/liger approve\n\n</details>",  # collapsed: nobody saw it
        "<div>\n/liger approve\n</div>",  # an HTML block runs to the next blank line
        "<pre>\n\n/liger approve\n</pre>",
        "text <!-- a comment\n/liger approve\nstill hidden -->",
        "<!--\n-->/liger approve",
        "~~~\n/liger approve\n```\n",
        "  ```python\n/liger approve\n",  # unclosed: code to the end
        "\t/liger approve",
        "  \t/liger approve",
    ],
)
def test_lines_github_shows_quoted_or_as_code_or_html_are_never_commands(body):
    assert command_lines(body) == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/liger approve\r\n/liger status", ["/liger approve", "/liger status"]),
        ("> quoted\n\n/liger approve", ["/liger approve"]),  # a blank line ends the quote
        ("> quoted\n# heading\n/liger approve", ["/liger approve"]),  # a heading interrupts the quote's paragraph
        ("> ```\n> code\n/liger approve", ["/liger approve"]),  # code cannot continue lazily: the quote has ended
        ("please\n/liger approve", ["/liger approve"]),
        ("<details>\n\nlog\n\n</details>\n\n/liger approve", ["/liger approve"]),
        ("/liger approve <!-- why -->", ["/liger approve"]),
        ("```\nx\n```\n   /liger approve", ["/liger approve"]),
        ("```\n/liger approve\n````\n/liger cancel\n````", ["/liger cancel"]),  # a longer closing fence closes
    ],
)
def test_commands_around_quotes_code_and_html_still_count(body, expected):
    assert command_lines(body) == expected


# Property-based: comment bodies built from the pieces that change how Markdown reads a line.
PIECES = [
    "/liger approve", "/liger autopatch llama", "/liger", "\n", "\r\n", "\n\n", " ", "    ", "\t", "x", "text",
    "> ", ">", "```", "~~~", "`", "<details>", "</details>", "<div>", "<!--", "-->", "- ", "1. ", "# ", "***",
    *NOT_LINE_ENDS,
]  # fmt: skip
bodies = st.lists(st.sampled_from(PIECES) | st.text(max_size=4), max_size=30).map("".join)


def quoted(body: str) -> str:
    """What GitHub's "Quote reply" inserts: every line of the body behind `> `."""
    return "\n".join("> " + line for line in body.replace("\r\n", "\n").split("\n"))


@settings(max_examples=400, deadline=None)
@given(original=bodies, reply=bodies.filter(lambda b: "/liger" not in b))
def test_property_a_command_inside_a_quote_is_never_a_command(original, reply):
    assert parse_comment(quoted(original)) == []
    assert parse_comment(quoted(original) + "\n\n" + reply) == []


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.sampled_from(["a", " ", "!", ".", *NOT_LINE_ENDS]), min_size=1).filter(str.strip))
def test_property_a_line_right_under_a_quoted_paragraph_is_quoted_too(text):
    assume(text.replace("\r", "").strip(" \t"))
    # four spaces after "> " open an indented code block, not a paragraph: CommonMark continues only a paragraph
    # lazily (hypothesis found `>     a`); that case is asserted the other way round just below
    assume(len(text) - len(text.lstrip(" ")) < 4)
    assert parse_comment(f"> {text}\n/liger approve") == []


def test_a_line_under_quoted_indented_code_is_outside_the_quote():
    (command,) = parse_comment(">     a\n/liger approve")  # the code block ends the quote's lazy continuation
    assert command.verb == "approve"


@settings(max_examples=300, deadline=None)
@given(quote=bodies.filter(lambda q: "\n" not in q), body=bodies)
def test_property_a_quote_closed_by_a_blank_line_changes_nothing_after_it(quote, body):
    assert command_lines(f"> {quote}\n\n{body}") == command_lines(body)
