"""Which lines of a comment GitHub renders as plain text of the comment itself: not quoted, not code, not HTML.

Commands are read from these lines only (`bot.commands.command_lines`), so the judgement must match how GitHub's
Markdown (CommonMark + GFM) renders the body, or a quote of an outsider's comment becomes the quoter's command:

- lines end at "\\n" only (CRLF is normalised first). U+2028/2029/0085, VT, FF, U+001C-1E and a lone CR are not
  line ends for a command: `str.splitlines()` breaks on them, GitHub's Markdown does not (a `> ` quote covers the
  whole line they sit in);
- a block quote (`>` after at most three spaces, inside list items too) covers its lines and, by CommonMark's lazy
  continuation, every following line of its paragraph: a `/liger` line right under a quote is quoted;
- fenced code (``` or ~~~, closed by a fence of the same kind at least as long), indented code (four columns, a tab
  counting to the next multiple of four), HTML blocks (CommonMark's seven kinds), `<details>` sections and HTML
  comments are never commands.

When in doubt a line is *not* plain: a command ignored is a nuisance, a command taken from a quote is a breach.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_FENCE_RE = re.compile(r"^ {0,3}(`{3,}(?!.*`)|~{3,})")
_THEMATIC_RE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_ATX_RE = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
_LIST_MARKER_RE = re.compile(r"^ {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)")
_BLOCK_TAGS = (
    "address|article|aside|base|basefont|blockquote|body|caption|center|col|colgroup|dd|details|dialog|dir|div|dl|"
    "dt|fieldset|figcaption|figure|footer|form|frame|frameset|h1|h2|h3|h4|h5|h6|head|header|hr|html|iframe|legend|"
    "li|link|main|menu|menuitem|nav|noframes|ol|optgroup|option|p|param|search|section|summary|table|tbody|td|"
    "tfoot|th|thead|title|tr|track|ul"
)
# CommonMark's HTML blocks 1-5: (start, end); the end is searched from the start line on
_HTML_UNTIL = (
    (re.compile(r"^ {0,3}<(?:script|pre|style|textarea)(?:[ \t>]|$)", re.I), re.compile(r"</(?:script|pre|style|textarea)>", re.I)),
    (re.compile(r"^ {0,3}<!--"), re.compile(r"-->")),
    (re.compile(r"^ {0,3}<\?"), re.compile(r"\?>")),
    (re.compile(r"^ {0,3}<![A-Za-z]"), re.compile(r">")),
    (re.compile(r"^ {0,3}<!\[CDATA\["), re.compile(r"\]\]>")),
)  # fmt: skip
_HTML_BLOCK_6 = re.compile(rf"^ {{0,3}}</?(?:{_BLOCK_TAGS})(?:[ \t/>]|$)", re.I)
_HTML_BLOCK_7 = re.compile(r"^ {0,3}(?:<[A-Za-z][A-Za-z0-9-]*(?:\s+[^<>]*)?/?>|</[A-Za-z][A-Za-z0-9-]*\s*>)[ \t]*$")
_DETAILS_OPEN = re.compile(r"<details(?:[\s>]|$)", re.I)
_DETAILS_CLOSE = re.compile(r"</details\s*>", re.I)
_COMMENT_OPEN, _COMMENT_CLOSE = "<!--", "-->"


def lines(body: str) -> list[str]:
    """The body's lines as GitHub's Markdown sees them: CRLF normalised, then split on "\\n" only."""
    return (body or "").replace("\r\n", "\n").split("\n")


def _columns(text: str) -> int:
    """Leading indentation in columns (a tab advances to the next multiple of four)."""
    width = 0
    for char in text:
        if char == " ":
            width += 1
        elif char == "\t":
            width += 4 - width % 4
        else:
            break
    return width


def _strip_containers(line: str) -> tuple[str, bool]:
    """The line without its block-quote and list-item markers, and whether a `>` was among them."""
    quoted = False
    while True:
        if _columns(line) >= 4:
            return line, quoted
        stripped = line.lstrip(" ")
        if stripped.startswith(">"):
            quoted, line = True, stripped[1:]
            line = line[1:] if line[:1] in (" ", "\t") else line
            continue
        marker = _LIST_MARKER_RE.match(line)
        if marker and line[marker.end() :].strip(" \t"):
            line = line[marker.end() :].lstrip(" \t")
            continue
        return line, quoted


def _interrupts_paragraph(line: str) -> bool:
    """A line that starts a block of its own instead of continuing the paragraph above (lazily, in a quote)."""
    return bool(
        not line.strip(" \t")
        or _THEMATIC_RE.match(line)
        or _ATX_RE.match(line)
        or _FENCE_RE.match(line)
        or _HTML_BLOCK_6.match(line)
        or any(start.match(line) for start, _ in _HTML_UNTIL)
        or (_LIST_MARKER_RE.match(line) and line.strip(" \t") not in ("-", "+", "*"))
        or line.lstrip(" ").startswith(">")
    )


@dataclass
class _State:
    fence: str | None = None  # the opening fence of the code block we are in
    html_until: re.Pattern | None = None  # an HTML block of kind 1-5 that ends at this pattern
    html_to_blank: bool = False  # an HTML block of kind 6-7: ends at a blank line
    quote_paragraph: bool = False  # the line above is paragraph text inside a block quote
    quote_fence: str | None = None  # a code block opened inside the block quote (it ends with the quote)
    paragraph: bool = False  # the line above is paragraph text (an HTML block of kind 7 cannot interrupt it)
    details: int = 0  # open <details> sections
    comment: bool = False  # inside an HTML comment begun in a paragraph


def plain_lines(body: str) -> Iterator[str]:
    """The lines GitHub renders as the comment's own paragraph text (HTML comments removed, quotes, code, HTML
    blocks and <details> left out), each stripped of spaces and tabs at its ends."""
    state = _State()
    for line in lines(body):
        text = _plain(line, state)
        if text is not None:
            yield text


def _plain(line: str, state: _State) -> str | None:
    if state.fence is not None:
        if _closes(state.fence, line):
            state.fence = None
        return None
    if state.html_until is not None:
        if state.html_until.search(line):
            state.html_until = None
        return None
    if state.html_to_blank:
        state.html_to_blank = line.strip(" \t") != ""
        _count_details(line, state)
        return None
    if state.comment:
        end = line.find(_COMMENT_CLOSE)
        if end < 0:
            return None
        state.comment = False
        line = line[end + len(_COMMENT_CLOSE) :]
        if not line.strip(" \t"):
            return None
    content, quoted = _strip_containers(line)
    if quoted:
        _quoted(content, state)
        return None
    state.quote_fence = None
    if state.quote_paragraph and not _interrupts_paragraph(line):
        return None  # lazy continuation: GitHub shows this line inside the quote above
    state.quote_paragraph = False
    return _block(line, state)


def _closes(fence: str, line: str) -> bool:
    closing = _FENCE_RE.match(line)
    same = closing is not None and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= len(fence)
    return same and not line[closing.end() :].strip(" \t")


def _quoted(content: str, state: _State) -> None:
    """A line inside a block quote: never plain; is it paragraph text a following line could continue lazily?"""
    state.paragraph = False
    if state.quote_fence is not None:
        state.quote_fence = None if _closes(state.quote_fence, content) else state.quote_fence
        state.quote_paragraph = False
        return
    opening = _FENCE_RE.match(content)
    state.quote_fence = opening.group(1) if opening else None
    state.quote_paragraph = not _interrupts_paragraph(content) and _columns(content) < 4


def _block(line: str, state: _State) -> str | None:
    was_paragraph, state.paragraph = state.paragraph, False
    if not line.strip(" \t"):
        return None
    if _columns(line) >= 4:
        state.paragraph = was_paragraph  # an indented line continues a paragraph, or is code: not a command
        return None
    opening = _FENCE_RE.match(line)
    if opening:
        state.fence = opening.group(1)
        return None
    for start, end in _HTML_UNTIL:
        if start.match(line):
            state.html_until = None if end.search(line, start.match(line).end()) else end
            return None
    if _HTML_BLOCK_6.match(line) or (not was_paragraph and _HTML_BLOCK_7.match(line)):
        state.html_to_blank = True
        _count_details(line, state)
        return None
    if _count_details(line, state) or state.details:
        return None
    state.paragraph = True
    return _without_comments(line, state).strip(" \t")


def _count_details(line: str, state: _State) -> bool:
    """Track <details> sections (collapsed: what they hold is not plain); True when the line has a tag of one."""
    opened, closed = len(_DETAILS_OPEN.findall(line)), len(_DETAILS_CLOSE.findall(line))
    state.details = max(0, state.details + opened - closed)
    return bool(opened or closed)


def _without_comments(line: str, state: _State) -> str:
    """The line with its HTML comments removed; one left open hides the lines after it until it closes."""
    kept = []
    while True:
        start = line.find(_COMMENT_OPEN)
        if start < 0:
            kept.append(line)
            return "".join(kept)
        kept.append(line[:start])
        end = line.find(_COMMENT_CLOSE, start + len(_COMMENT_OPEN))
        if end < 0:
            state.comment = True
            return "".join(kept)
        line = line[end + len(_COMMENT_CLOSE) :]
