"""benchmarks/NOTES.md holds one section per benchmark; each benchmark rewrites only its own."""

from __future__ import annotations

from pathlib import Path


def replace_section(path: Path, heading: str, section: str) -> None:
    """Put `section` (which starts with `heading`) where `heading` stands, or append it; other sections are kept."""
    text = path.read_text() if path.exists() else "# Benchmark notes\n"
    start = text.find(heading)
    if start < 0:
        path.write_text(text.rstrip("\n") + "\n\n" + section)
        return
    end = text.find("\n## ", start + len(heading))
    rest = text[end + 1 :] if end >= 0 else ""
    path.write_text(text[:start] + section + ("\n" + rest if rest else ""))
