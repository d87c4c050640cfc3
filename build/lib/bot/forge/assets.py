"""Images a PR body shows (a benchmark plot): checked, then named by their content, whichever forge stores them.

A name becomes a path in a repository or a folder, so it must be one plain file name with an image's extension
(ASSET_NAME), and the bytes must be that image (its signature) and at most MAX_ASSET_BYTES: a stray path in a
body can never make the bot publish a key or a config file. The stored name is `<sha256 prefix>-<name>`: the same
plot is stored once, and a link to it never shows other bytes later.
"""

from __future__ import annotations

import hashlib
import re

from bot.forge.base import AssetRejected

ASSET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}\.(png|jpg|jpeg|gif)")
MAX_ASSET_BYTES = 5 * 1024 * 1024
DIGEST_CHARS = 16
_SIGNATURES = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpg": (b"\xff\xd8\xff",),
    "jpeg": (b"\xff\xd8\xff",),
    "gif": (b"GIF87a", b"GIF89a"),
}


def stored_name(name: str, data: bytes) -> str:
    """`<sha256 prefix>-<name>` for an image that may be published; AssetRejected saying why otherwise."""
    match = ASSET_NAME.fullmatch(name)
    if match is None:
        raise AssetRejected(f"asset name {name[:80]!r} is not a plain image file name ({ASSET_NAME.pattern})")
    if len(data) > MAX_ASSET_BYTES:
        raise AssetRejected(
            f"asset {name} is {len(data) / 2**20:.1f} MiB; the limit is {MAX_ASSET_BYTES / 2**20:.0f} MiB", status=413
        )
    if not data.startswith(_SIGNATURES[match.group(1)]):
        raise AssetRejected(f"asset {name} does not hold a {match.group(1)} image")
    return f"{hashlib.sha256(data).hexdigest()[:DIGEST_CHARS]}-{name}"
