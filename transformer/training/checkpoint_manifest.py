"""A checkpoint's manifest: the size and checksum of each of its files, and their check.

Orbax stores the arrays as compressed chunks in OCDBT data files without a checksum of their
contents, so a file damaged after its save but still decodable (bytes flipped by a failing
disk or a faulty copy, the size unchanged) restores as wrong values without an error. Each
checkpoint therefore carries `checksums.json`: every file's size and checksum, and a checksum
of that listing, so that damage to the manifest itself is found too.

`write` runs in Orbax's asynchronous save thread once every file of the step is written and
finalized, before Orbax renames the step directory to its final name (the Checkpointer hands
it to Orbax as the post-finalization callback): the manifest is inside the same atomic
commit, so a listed checkpoint has one and a save killed before the rename leaves neither.
The two files Orbax writes after that callback are not covered: the step's
`_CHECKPOINT_METADATA` (the commit time and the ranking metrics) and `commit_success.txt`.

The checksum is CRC-32 (`zlib.crc32`, standard library). The damage to catch is accidental
(bit rot, a copy cut short, a file overwritten), not an adversary's: CRC-32 detects every
error burst of up to 32 bits, so any single flipped byte, and any other change with
probability 1 - 2**-32 per file. It is the fastest checksum in the standard library:
`benchmarks/checkpoint_checksums.py` measures it against SHA-256 (with the CPU's SHA
instructions) and BLAKE2b, and what hashing adds to a save and a restore (the figures:
docs/reliability.md). zlib releases the GIL while it hashes,
so the save thread's hashing does not hold up the training loop's Python thread. Sizes are
compared before anything is read, so a truncated or deleted file is found without hashing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor

MANIFEST = "checksums.json"
ALGORITHM = "crc32"
# Files at the top of a step directory that Orbax writes or rewrites after `write` ran.
WRITTEN_AFTER = frozenset({"_CHECKPOINT_METADATA", "commit_success.txt", MANIFEST})
_CHUNK = 4 << 20  # bytes read per call: large enough for full speed, small enough to stay cheap
_WORKERS = min(8, os.cpu_count() or 1)  # files hashed at once (zlib hashes without the GIL)

OK, NO_MANIFEST, DAMAGED = "OK", "no manifest", "damaged"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of checking one checkpoint: OK, NO_MANIFEST (saved before manifests were
    written: nothing to check against) or DAMAGED, with `detail` naming the file."""

    status: str
    detail: str = ""

    def __str__(self) -> str:
        if self.status == DAMAGED:
            return f"{DAMAGED} ({self.detail})"
        if self.status == NO_MANIFEST:
            return f"{NO_MANIFEST} (saved before checksums were recorded; not verified)"
        return OK


def damaged_manifest(why: str) -> Verdict:
    return Verdict(DAMAGED, f"{MANIFEST} {why}")


def write(step_dir: str) -> None:
    """Writes step_dir/checksums.json over every file below step_dir (but WRITTEN_AFTER)."""
    names = _listing(step_dir)
    found = _checksums(step_dir, names)
    for error in (f for f in found if isinstance(f, OSError)):
        raise error  # a file of the save vanished or cannot be read: the save fails
    entries = dict(zip(names, found, strict=True))
    body = {"algorithm": ALGORITHM, "files": entries}
    body["checksum"] = _crc_hex(_canonical(body))
    # A plain write: the rename of the whole step directory is what commits it.
    with open(os.path.join(step_dir, MANIFEST), "w") as f:
        json.dump(body, f, indent=1, sort_keys=True)


def verify(step_dir: str) -> Verdict:
    """Checks every file listed in step_dir's manifest: sizes first, then checksums."""
    path = os.path.join(step_dir, MANIFEST)
    if not os.path.exists(path):
        return Verdict(NO_MANIFEST)
    entries, problem = _read(path)
    if problem:
        return damaged_manifest(problem)
    damage = _size_damage(step_dir, entries) or _content_damage(step_dir, entries)
    if not damage:
        return Verdict(OK)
    more = f" (and {len(damage) - 1} more files)" if len(damage) > 1 else ""
    return Verdict(DAMAGED, damage[0] + more)


def _listing(step_dir: str) -> list[str]:
    """Paths of the files below step_dir, relative to it, sorted, but WRITTEN_AFTER."""
    names = []
    for root, _, files in os.walk(step_dir):
        for name in files:
            names.append(os.path.relpath(os.path.join(root, name), step_dir))
    return sorted(n for n in names if n not in WRITTEN_AFTER)


def _checksums(step_dir: str, names: list[str]) -> list:
    """[size, crc32 hex] of each file, or the OSError reading it raised; `_WORKERS` files
    at a time."""
    paths = [os.path.join(step_dir, name) for name in names]
    with ThreadPoolExecutor(max_workers=_WORKERS) as pool:
        return list(pool.map(_file_checksum, paths))


def _file_checksum(path: str) -> list | OSError:
    crc, size = 0, 0
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    try:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buffer):
                crc = zlib.crc32(view[:n], crc)
                size += n
    except OSError as e:
        return e
    return [size, f"{crc:08x}"]


def _crc_hex(data: bytes) -> str:
    return f"{zlib.crc32(data):08x}"


def _canonical(body: dict) -> bytes:
    """The bytes the manifest's own checksum covers: its algorithm and file entries."""
    listed = {"algorithm": body["algorithm"], "files": body["files"]}
    return json.dumps(listed, sort_keys=True, separators=(",", ":")).encode()


def _read(path: str) -> tuple[dict, str]:
    """({file: [size, crc]}, '') from a manifest, or ({}, why it is damaged)."""
    try:
        with open(path, "rb") as f:
            body = json.loads(f.read())
        if body["algorithm"] != ALGORITHM:
            return {}, f"names an unknown algorithm {body['algorithm']!r}"
        if _crc_hex(_canonical(body)) != body["checksum"]:
            return {}, "does not match its own checksum"
        if not all(_is_entry(entry) for entry in body["files"].values()):
            return {}, "is not a valid manifest"
        return body["files"], ""
    except OSError as e:
        return {}, f"cannot be read ({e.strerror})"
    except (ValueError, KeyError, TypeError, AttributeError):  # not JSON, or not its shape
        return {}, "is not a valid manifest"


def _is_entry(entry) -> bool:
    return (
        isinstance(entry, list)
        and len(entry) == 2
        and isinstance(entry[0], int)
        and isinstance(entry[1], str)
    )


def _size_damage(step_dir: str, entries: dict) -> list[str]:
    """Files missing or of another size than saved: found without reading them."""
    damage = []
    for name, (size, _) in entries.items():
        try:
            actual = os.path.getsize(os.path.join(step_dir, name))
        except OSError:
            damage.append(f"{name} is missing")
            continue
        if actual != size:
            damage.append(f"{name} has {actual} bytes, {size} when saved")
    return damage


def _content_damage(step_dir: str, entries: dict) -> list[str]:
    """Files whose checksum differs from the saved one (their sizes already match)."""
    names = sorted(entries)
    damage = []
    for name, found in zip(names, _checksums(step_dir, names), strict=True):
        if isinstance(found, OSError):
            damage.append(f"{name} cannot be read ({found.strerror})")
        elif found[1] != entries[name][1]:
            damage.append(f"{name} does not match its checksum")
    return damage
