"""The official-documentation step of the sandbox image build, against a local HTTP server (no network).

The server stands in for GitHub's archive endpoint: it serves tarballs laid out like a release
archive (one top directory, the repository's files below it), so the fetch, the filtering to the
documentation folder, the skip mode and every failure path run as they would in ``docker build``.
"""

import io
import subprocess
import sys
import tarfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from adapters_support import ORACLES, T28, copy_problems

from metakernelbench.adapters import official_docs
from metakernelbench.adapters.build import build
from metakernelbench.adapters.dsl import DSLS
from metakernelbench.adapters.official_docs import SOURCES, DocsFetchError, fetch

SCRIPT = Path(official_docs.__file__)


def _tarball(path: Path, top: str, files: dict[str, bytes], links: dict[str, str] | None = None) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)


@pytest.fixture
def server(tmp_path):
    """A local HTTP server over ``tmp_path/www``; yields the URL template the build argument takes."""
    root = tmp_path / "www"
    root.mkdir()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}/{{repo}}/{{tag}}.tar.gz"
    httpd.shutdown()
    httpd.server_close()


def _publish(root: Path, dsl: str, files: dict[str, bytes], **kw) -> None:
    source = SOURCES[dsl]
    path = root / source.repo / f"{source.tag}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    _tarball(path, f"{source.repo.split('/')[1]}-{source.tag.lstrip('v')}", files, **kw)


def test_fetch_keeps_only_the_documentation_folder(server, tmp_path):
    root, url = server
    _publish(root, "tirx", {
        "docs/tirx/overview.rst": b"TIRx overview\n",
        "docs/tirx/tile_primitives/copy.rst": b"copy\n",
        "docs/tirx_other/x.rst": b"not this folder\n",
        "docs/arch/index.rst": b"other docs\n",
        "python/tvm/__init__.py": b"code\n",
        "docs/tirx/../../escape.rst": b"traversal\n",
    }, links={"docs/tirx/link.rst": "/etc/passwd"})
    out = tmp_path / "app" / "docs" / "tirx-official"
    pages = fetch("tirx", out, url)
    assert pages == ["overview.rst", "tile_primitives/copy.rst"]
    assert (out / "tile_primitives" / "copy.rst").read_text() == "copy\n"
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == ["index.md", "overview.rst", "tile_primitives/copy.rst"]
    index = (out / "index.md").read_text()
    assert "apache/tvm" in index and "v0.27.0" in index and "- [overview.rst](overview.rst)" in index
    assert not (tmp_path / "escape.rst").exists() and not (tmp_path / "app" / "escape.rst").exists()
    assert [p.name for p in out.parent.iterdir()] == ["tirx-official"]  # no staging folder left behind


def _run(args: list[str]) -> subprocess.CompletedProcess:
    """The script as the Dockerfile runs it: a standalone file, standard library only."""
    return subprocess.run([sys.executable, "-I", str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_build_step_fetches_cute_dsl_pages(server, tmp_path):
    root, url = server
    _publish(root, "cutedsl", {"media/docs/pythonDSL/quick_start.rst": b"Quick start\n",
                               "media/docs/pythonDSL/cute_dsl_general/dsl_modes.png": b"\x89PNG",
                               "include/cute/tensor.hpp": b"// code\n"})
    out = tmp_path / "cutedsl-official"
    run = _run(["--dsl", "cutedsl", "--out", str(out), "--mode", "fetch", "--url", url])
    assert run.returncode == 0, run.stderr
    assert "fetched 2 official CuTe DSL documentation files" in run.stdout
    assert (out / "cute_dsl_general" / "dsl_modes.png").read_bytes() == b"\x89PNG"
    assert not (out / "include").exists()


@pytest.mark.parametrize(("setup", "expected"), [
    ("missing", "HTTP 404 from http://127.0.0.1"),
    ("no-folder", "holds no files under docs/tirx/"),
    ("not-gzip", "is not a readable .tar.gz archive"),
    ("refused", "cannot reach http://127.0.0.1:9/"),
])
def test_a_failed_fetch_fails_the_build_with_one_clear_line(server, tmp_path, setup, expected):
    root, url = server
    if setup == "no-folder":
        _publish(root, "tirx", {"docs/arch/index.rst": b"x\n"})
    elif setup == "not-gzip":
        (root / "apache" / "tvm").mkdir(parents=True)
        (root / "apache" / "tvm" / "v0.27.0.tar.gz").write_text("<html>not an archive</html>")
    elif setup == "refused":
        url = "http://127.0.0.1:9/{repo}/{tag}.tar.gz"
    out = tmp_path / "tirx-official"
    run = _run(["--dsl", "tirx", "--out", str(out), "--url", url, "--timeout", "10"])
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0]
    assert lines[0].startswith("error: the official TIRx documentation (apache/tvm v0.27.0, docs/tirx)")
    assert "MKB_OFFICIAL_DOCS=skip" in lines[0]
    assert not out.exists()


def test_a_bad_url_template_is_a_clear_error(tmp_path):
    with pytest.raises(DocsFetchError, match="only {repo} and {tag}"):
        fetch("tirx", tmp_path / "out", "http://mirror/{project}.tgz")


def test_skip_says_the_pages_are_absent(tmp_path):
    out = tmp_path / "cutedsl-official"
    run = _run(["--dsl", "cutedsl", "--out", str(out), "--mode", "skip"])
    assert run.returncode == 0, run.stderr
    note = (out / "README.md").read_text()
    assert "absent from this image" in note and "MKB_OFFICIAL_DOCS=skip" in note and "/app/docs/cutedsl-api/" in note
    bad = _run(["--dsl", "cutedsl", "--out", str(out), "--mode", "maybe"])
    assert bad.returncode == 2 and "invalid choice: 'maybe'" in bad.stderr


def test_tags_match_the_pinned_packages():
    """Bumping a DSL's pin without its documentation tag (or the reverse) fails here."""
    pins = {key: dict(p.split("==") for p in dsl.packages) for key, dsl in DSLS.items()}
    assert SOURCES["cutedsl"].tag == "v" + pins["cutedsl"]["nvidia-cutlass-dsl[cu13]"]
    assert SOURCES["tirx"].tag == "v" + pins["tirx"]["apache-tvm"].split(".post")[0]


def test_generated_tasks_run_the_step_with_a_build_argument(tmp_path):
    problems = copy_problems(tmp_path / "problems", ids=("28",))
    out = tmp_path / "tasks"
    build(problems, out, tmp_path / "dataset.toml", ORACLES)
    for dsl in DSLS:
        env = out / f"{T28}_{dsl}" / "environment"
        assert (env / "official_docs.py").read_bytes() == SCRIPT.read_bytes()
        dockerfile = (env / "Dockerfile").read_text()
        assert "ARG MKB_OFFICIAL_DOCS=fetch" in dockerfile
        assert f'--dsl {dsl} --mode "$MKB_OFFICIAL_DOCS"' in dockerfile and f"/app/docs/{dsl}-official" in dockerfile
        assert "MKB_OFFICIAL_DOCS: ${MKB_OFFICIAL_DOCS:-fetch}" in (env / "docker-compose.yaml").read_text()
        assert f"/app/docs/{dsl}-official/" in (out / f"{T28}_{dsl}" / "instruction.md").read_text()
