"""Fetch a DSL's official documentation pages, at the pinned version, while the sandbox image is built.

The paper's agent read the DSLs' official documentation; the sandbox has no network, so the pages
have to be in the image. They are third-party text and are never committed here: this script runs
once in the image build (``python official_docs.py --dsl tirx --out /app/docs/tirx-official``) and
takes the documentation folder from the source archive of the release tag that matches the
installed package (``SOURCES``). Only that folder is kept; everything else in the archive is
skipped while it streams by.

The build argument ``MKB_OFFICIAL_DOCS`` chooses: ``fetch`` (the default) fails the build with one
clear line when the pages cannot be had, so an image never silently lacks them; ``skip`` builds
without them and leaves a README in their place that tells the agent they are absent. A host
without GitHub access builds with ``skip``, or points ``MKB_DOCS_ARCHIVE_URL`` at a mirror
(``{repo}`` and ``{tag}`` are filled in). Standard library only: it runs in the image.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = [
    "DEFAULT_ARCHIVE_URL", "DocsFetchError", "MAX_FILE_BYTES", "MAX_TOTAL_BYTES", "SKIP_HINT", "SOURCES", "Source",
    "absent_note", "fetch", "main",
]


@dataclass(frozen=True)
class Source:
    """Where one DSL's official pages live: a folder of a repository at a release tag."""

    name: str
    package: str
    repo: str
    tag: str
    folder: str

    @property
    def browse_url(self) -> str:
        return f"https://github.com/{self.repo}/tree/{self.tag}/{self.folder}"


# The tags match the pinned packages (adapters/dsl.py; a test keeps them equal).
SOURCES = {
    "cutedsl": Source("CuTe DSL", "nvidia-cutlass-dsl 4.8.1", "NVIDIA/cutlass", "v4.8.1", "media/docs/pythonDSL"),
    "tirx": Source("TIRx", "apache-tvm 0.27.0", "apache/tvm", "v0.27.0", "docs/tirx"),
}
DEFAULT_ARCHIVE_URL = "https://codeload.github.com/{repo}/tar.gz/refs/tags/{tag}"
SKIP_HINT = ("to build without them: --build-arg MKB_OFFICIAL_DOCS=skip (compose: export MKB_OFFICIAL_DOCS=skip); "
             "from a mirror: --build-arg MKB_DOCS_ARCHIVE_URL=<url with {repo} and {tag}>")
MAX_FILE_BYTES = 20 * 2**20
MAX_TOTAL_BYTES = 200 * 2**20


class DocsFetchError(RuntimeError):
    """The official pages could not be fetched; the message is one line that says why and what to do."""


def _inside(member: tarfile.TarInfo, folder: str) -> PurePosixPath | None:
    """The member's path below ``folder`` (the archive's top directory stripped), or None if elsewhere."""
    parts = PurePosixPath(member.name).parts[1:]
    path = PurePosixPath(*parts) if parts else PurePosixPath(".")
    prefix = PurePosixPath(folder)
    if not member.isfile() or ".." in path.parts or path.is_absolute() or not path.is_relative_to(prefix):
        return None
    return path.relative_to(prefix)


def _extract(stream, source: Source, target: Path, url: str) -> list[str]:
    written: list[str] = []
    total = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|gz") as archive:
            for member in archive:
                rel = _inside(member, source.folder)
                if rel is None:
                    continue
                if member.size > MAX_FILE_BYTES or total + member.size > MAX_TOTAL_BYTES:
                    raise DocsFetchError(f"{url}: {source.folder}/{rel} would exceed the size limit")
                data = archive.extractfile(member)
                if data is None:
                    continue
                dest = target / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data.read())
                total += member.size
                written.append(rel.as_posix())
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DocsFetchError(f"{url} is not a readable .tar.gz archive ({type(exc).__name__}: {exc})") from exc
    return sorted(written)


def _index(source: Source, pages: list[str]) -> str:
    lines = [f"# {source.name}: the official documentation ({source.package})\n",
             f"The `{source.folder}` folder of {source.repo} at tag `{source.tag}` ({source.browse_url}),",
             "fetched when this image was built. Pages are reStructuredText/Markdown sources as published.\n"]
    return "\n".join(lines + [f"- [{p}]({p})" for p in pages]) + "\n"


def absent_note(source: Source, dsl: str) -> str:
    """What the agent finds instead of the pages when the image was built with ``skip``."""
    return (f"# {source.name}: the official documentation is absent from this image\n\n"
            f"This image was built with MKB_OFFICIAL_DOCS=skip, so the official pages ({source.folder} of "
            f"{source.repo} at {source.tag}) were not fetched. Use the guide /app/docs/{dsl}.md and the API "
            f"reference generated from the installed package, /app/docs/{dsl}-api/.\n")


def fetch(dsl: str, out: Path, url_template: str = DEFAULT_ARCHIVE_URL, timeout: float = 120.0) -> list[str]:
    """Write the official pages of ``dsl`` into ``out`` (replacing it); the pages written."""
    source = SOURCES[dsl]
    try:
        url = url_template.format(repo=source.repo, tag=source.tag)
    except (KeyError, IndexError, ValueError) as exc:
        raise DocsFetchError(f"bad MKB_DOCS_ARCHIVE_URL {url_template!r}: only {{repo}} and {{tag}} may be used") \
            from exc
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                pages = _extract(response, source, staging, url)
        except urllib.error.HTTPError as exc:
            raise DocsFetchError(f"HTTP {exc.code} from {url}") from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DocsFetchError(f"cannot reach {url} ({reason})") from exc
        if not pages:
            raise DocsFetchError(f"{url} holds no files under {source.folder}/ (wrong tag or folder?)")
        (staging / "index.md").write_text(_index(source, pages))
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
        return pages
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Fetch a DSL's official documentation at its pinned version.")
    p.add_argument("--dsl", required=True, choices=sorted(SOURCES))
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--mode", default="fetch", choices=("fetch", "skip"), help="MKB_OFFICIAL_DOCS")
    p.add_argument("--url", default=DEFAULT_ARCHIVE_URL, help="archive URL template with {repo} and {tag}")
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args(argv)
    source = SOURCES[args.dsl]
    if args.mode == "skip":
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "README.md").write_text(absent_note(source, args.dsl))
        print(f"official {source.name} documentation skipped (MKB_OFFICIAL_DOCS=skip)")
        return 0
    try:
        pages = fetch(args.dsl, args.out, args.url or DEFAULT_ARCHIVE_URL, args.timeout)
    except DocsFetchError as exc:
        print(f"error: the official {source.name} documentation ({source.repo} {source.tag}, {source.folder}) "
              f"could not be fetched: {exc}; {SKIP_HINT}", file=sys.stderr)
        return 1
    print(f"fetched {len(pages)} official {source.name} documentation files into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
