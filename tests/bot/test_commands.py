"""The `/liger` grammar: pure functions, no server."""

from __future__ import annotations

import pytest

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


def test_kernel_and_fuse_are_rows_of_the_table_with_help_and_permission():
    text = render_help()
    assert "| `/liger kernel SPEC [--name NAME]` |" in text and "| `/liger fuse path/in/repo.py:Factory` |" in text
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
