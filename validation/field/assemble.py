#!/usr/bin/env python3
"""Lay out the field corpus from the source repositories (the traces are other projects' files and
are not in this repository).

    python validation/field/assemble.py --mirrors DIR --out ../shared/traces/field

``DIR`` holds a bare or ordinary git clone of each source repository, named ``owner+name`` (as
``github.com/owner/name``); each entry of corpus.json is taken from its ``commit:path`` (a path of the
form ``archive.tar.gz!member`` is a member of a tarball there), checked against its sha256 and
written to ``OUT/<files[0]>``. Entries under ``shared:`` are the public traces already in
``../shared/traces`` and are skipped. Prints one line per entry; exits 1 if any could not be laid
out.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _git_dir(mirrors: str, repo: str) -> str:
    base = os.path.join(mirrors, repo.replace("/", "+"))
    for d in (os.path.join(base, "repo"), base, os.path.join(base, ".git")):
        if os.path.exists(os.path.join(d, "HEAD")):
            return d
    raise FileNotFoundError(f"no clone of {repo} under {mirrors}")


def blob(mirrors: str, repo: str, commit: str, path: str) -> bytes:
    """The bytes of ``path`` at ``commit`` (``archive!member``: a member of a tarball there)."""
    archive, _, member = path.partition("!")
    data = subprocess.run(
        ["git", "--git-dir", _git_dir(mirrors, repo), "show", f"{commit}:{archive}"],
        check=True,
        capture_output=True,
    ).stdout
    if not member:
        return data
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        f = tf.extractfile(member)
        if f is None:
            raise FileNotFoundError(f"{member} is not a file in {archive}")
        return f.read()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirrors", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    with open(os.path.join(HERE, "corpus.json"), encoding="utf-8") as f:
        entries = json.load(f)
    bad = 0
    for e in entries:
        rel = e["files"][0]
        if rel.startswith("shared:"):
            continue
        try:
            data = blob(a.mirrors, e["repository"], e["commit"], e["path"])
        except (OSError, subprocess.CalledProcessError, tarfile.TarError) as x:
            print(f"{e['id']}: not laid out: {x}")
            bad += 1
            continue
        if hashlib.sha256(data).hexdigest() != e["sha256"]:
            print(f"{e['id']}: sha256 differs from corpus.json: not written")
            bad += 1
            continue
        dst = os.path.join(a.out, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as f:
            f.write(data)
        print(f"{e['id']}: {dst}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
