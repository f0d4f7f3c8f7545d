"""Every route reads a JSON body through app/api/bodies.py: one strict decoder (no NaN, no 4,301-digit integers,
UTF-8 only) and one media-type check, so no route is looser than another (the compatible APIs once let NaN in)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "app" / "api"
LOOSE = re.compile(r"STRICT_JSON\.decode\(|json\.loads\(|request\.get_json\(|request\.json\b|"
                   r"mimetype != \"application/json\"")


def test_json_bodies_are_decoded_and_their_media_type_checked_in_bodies_py_only() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in sorted(API.rglob("*.py"))
             if path.name != "bodies.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if LOOSE.search(line)]
    assert not found, "JSON read outside app/api/bodies.py:\n" + "\n".join(found)
    assert LOOSE.search((API / "bodies.py").read_text())  # the check reads the right place
