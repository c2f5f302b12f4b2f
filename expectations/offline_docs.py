"""Data Docs that work without internet access (storage clusters are often air-gapped).

Great Expectations' pages load jQuery, Bootstrap, bootstrap-table, Font Awesome and more from
CDNs; offline, ``$`` is undefined and the index lists no validation result. After each build,
``make_offline(site_dir)`` rewrites every page of the site to load its assets from
``<site>/static/offline/`` and drops the CDN tags it has no copy of (Vega for profiling
pages, the date picker and dark theme, Font Awesome). The copies come from:

- the installed pyspark's ``spark-core`` jar (Spark's own web UI assets): jQuery 3.7.1 (the
  version Great Expectations asks for), Bootstrap 5 CSS and JS bundle (with Popper);
- this package's ``static/``: the bootstrap-table calls the pages make, Bootstrap 4 data
  attributes for Bootstrap 5, and the status icons as words (``data-docs-offline.*``).

Without pyspark the pages still get the project's own files and lose the CDN tags, so they
render without styling rather than waiting for unreachable hosts. Idempotent.

Each page's icon link is pointed at the site's ``static/images/favicon.ico``: GE writes it
as ``../../../static/images/favicon.ico`` on validation pages, four directories deep, which
is one level short and 404s.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import zipfile
from pathlib import Path

OFFLINE_DIR = Path("static") / "offline"
OWN_STATIC = Path(__file__).resolve().parent / "static"
OWN_FILES = ("data-docs-offline.js", "data-docs-offline.css")
SPARK_STATIC = "org/apache/spark/ui/static/"
SPARK_FILES = ("jquery.min.js", "bootstrap.min.css", "bootstrap.bundle.min.js")
PAGE_BYTES_MAX = 64 * 1024 * 1024  # a page larger than this is left as it is
FAVICON = Path("static") / "images" / "favicon.ico"  # GE copies it into every site

# A tag whose URL is on a CDN: a script (with its closing tag) or a stylesheet link.
_CDN_TAG = re.compile(
    r"<script\b[^>]*\bsrc=\"(https?://[^\"]+)\"[^>]*>\s*</script>"
    r"|<link\b[^>]*\bhref=\"(https?://[^\"]+)\"[^>]*/?>",
    re.IGNORECASE,
)
# CDN URL fragment -> the local file that replaces it; any other CDN tag is dropped.
_SCRIPTS: tuple[tuple[str, str], ...] = (
    ("code.jquery.com/jquery-", "jquery.min.js"),
    ("bootstrap/4.3.1/js/bootstrap.min.js", "bootstrap.bundle.min.js"),  # Popper included
    ("dist/bootstrap-table.min.js", "data-docs-offline.js"),
)
_STYLESHEETS: tuple[tuple[str, str], ...] = (
    ("bootstrap/4.3.1/css/bootstrap.min.css", "bootstrap.min.css"),
    ("font-awesome", "data-docs-offline.css"),
)
# An image from the internet (Great Expectations' logo): its alt text instead.
_REMOTE_IMAGE = re.compile(r"<img\b[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>", re.IGNORECASE)
_ALT = re.compile(r"\balt=\"([^\"]*)\"", re.IGNORECASE)
# The page's icon ("shortcut icon" in GE's template).
_ICON_LINK = re.compile(r"<link\b[^>]*\brel=\"(?:shortcut )?icon\"[^>]*>", re.IGNORECASE)
_MARKER = "<!-- data docs: assets served locally -->"


def spark_core_jar() -> Path | None:
    """The installed pyspark's ``spark-core`` jar, or None."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    jars = sorted((Path(spec.origin).parent / "jars").glob("spark-core_*.jar"))
    return jars[-1] if jars else None


def copy_assets(target: Path) -> set[str]:
    """Copy the assets into ``target``; returns the names present there."""
    target.mkdir(parents=True, exist_ok=True)
    for name in OWN_FILES:
        shutil.copyfile(OWN_STATIC / name, target / name)
    jar = spark_core_jar()
    if jar is not None:
        with zipfile.ZipFile(jar) as archive:
            members = set(archive.namelist())
            for name in SPARK_FILES:
                if (target / name).is_file() or SPARK_STATIC + name not in members:
                    continue
                temporary = target / f".{name}.tmp"
                temporary.write_bytes(archive.read(SPARK_STATIC + name))
                os.replace(temporary, target / name)
    return {p.name for p in target.iterdir() if p.is_file() and not p.name.startswith(".")}


def rewrite_page(text: str, prefix: str, available: set[str], favicon: str | None = None) -> str:
    """``text`` with every CDN tag replaced by a local one under ``prefix`` or dropped, and
    its icon link pointed at ``favicon`` (a URL relative to the page) when one is given."""
    if _MARKER in text:
        return text
    if favicon is not None:
        icon = f'<link rel="icon" href="{favicon}" type="image/x-icon">'
        text = _ICON_LINK.sub(lambda _: icon, text)
    used: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        script, stylesheet = match.group(1), match.group(2)
        url, table = (script, _SCRIPTS) if script else (stylesheet, _STYLESHEETS)
        local = next((name for key, name in table if key in url), None)
        if local is None or local not in available or local in used:
            return ""
        used.add(local)
        if local.endswith(".css"):
            return f'<link rel="stylesheet" href="{prefix}{local}">'
        return f'<script src="{prefix}{local}"></script>'

    rewritten = _CDN_TAG.sub(replace, text)
    rewritten = _REMOTE_IMAGE.sub(_alt_text, rewritten)
    if "data-docs-offline.css" not in used and "data-docs-offline.css" in available:
        rewritten = rewritten.replace(
            "</head>", f'<link rel="stylesheet" href="{prefix}data-docs-offline.css"></head>', 1
        )
    return rewritten.replace("</head>", f"{_MARKER}</head>", 1)


def _alt_text(match: re.Match[str]) -> str:
    alt = _ALT.search(match.group(0))
    return f"<span>{alt.group(1)}</span>" if alt else ""


def make_offline(site_dir: Path) -> int:
    """Rewrite every page under ``site_dir``; returns how many pages were rewritten."""
    site_dir = Path(site_dir)
    if not site_dir.is_dir():
        return 0
    assets = site_dir / OFFLINE_DIR
    available = copy_assets(assets)
    has_favicon = (site_dir / FAVICON).is_file()
    rewritten = 0
    for page in site_dir.rglob("*.html"):
        if page.stat().st_size > PAGE_BYTES_MAX:
            continue
        text = page.read_text(encoding="utf-8")
        prefix = Path(os.path.relpath(assets, page.parent)).as_posix() + "/"
        icon = Path(os.path.relpath(site_dir / FAVICON, page.parent)).as_posix()
        new = rewrite_page(text, prefix, available, icon if has_favicon else None)
        if new != text:
            temporary = page.with_name(f".{page.name}.tmp")
            temporary.write_text(new, encoding="utf-8")
            os.replace(temporary, page)
            rewritten += 1
    return rewritten
