#!/usr/bin/env python3
"""Copy KaTeX from an npm tarball into docs/assets/katex/ (the site's offline maths renderer).

Usage: npm pack katex@0.19.1 && python scripts/vendor_katex.py katex-0.19.1.tgz

Copies dist/katex.min.js, dist/contrib/auto-render.min.js, dist/fonts/*.woff2 and the LICENSE,
and writes dist/katex.min.css with only the WOFF2 font entries (the WOFF and TTF copies are not
shipped). Needs nothing but Python's standard library.
"""

from __future__ import annotations

import re
import sys
import tarfile
from pathlib import Path

DEST = Path(__file__).resolve().parents[1] / "docs" / "assets" / "katex"


def main(tarball: str) -> None:
    with tarfile.open(tarball) as tar:
        def read(name: str) -> bytes:
            return tar.extractfile(f"package/{name}").read()

        (DEST / "fonts").mkdir(parents=True, exist_ok=True)
        (DEST / "contrib").mkdir(exist_ok=True)
        (DEST / "katex.min.js").write_bytes(read("dist/katex.min.js"))
        (DEST / "contrib" / "auto-render.min.js").write_bytes(read("dist/contrib/auto-render.min.js"))
        (DEST / "LICENSE").write_bytes(read("LICENSE"))
        css = read("dist/katex.min.css").decode()
        css = re.sub(r',url\(fonts/[^)]*\.woff\) format\("woff"\),url\(fonts/[^)]*\.ttf\) '
                     r'format\("truetype"\)', "", css)
        (DEST / "katex.min.css").write_text(css)
        for member in tar.getmembers():
            if member.name.startswith("package/dist/fonts/") and member.name.endswith(".woff2"):
                (DEST / "fonts" / Path(member.name).name).write_bytes(tar.extractfile(member).read())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/vendor_katex.py katex-VERSION.tgz (from `npm pack katex@VERSION`)")
    main(sys.argv[1])
