"""A PEP 517 build backend of the standard library only, so that `pip install ./python` works
offline from a clone: it packs the `hero` package (its modules, `py.typed`, and the Lua library
from the repository's docs/) into a wheel with the metadata of pyproject.toml. It builds wheels and sdists; editable
installs point a .pth file at this folder."""
import base64
import hashlib
import io
import os
import ast
import tarfile
import zipfile

try:
    import tomllib
except ImportError:  # Python 3.10: this file's own tables are simple enough to read by hand
    tomllib = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "hero"


def _project():
    path = os.path.join(ROOT, "pyproject.toml")
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    tables, table = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                table = tables.setdefault(line.strip("[]"), {})
            elif "=" in line and table is not None:
                k, v = (x.strip() for x in line.split("=", 1))
                table[k] = ast.literal_eval(v)
    project = tables["project"]
    project["optional-dependencies"] = tables.get("project.optional-dependencies", {})
    return project


def _dist_name(p):
    return p["name"].replace("-", "_")


def _metadata(p):
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p.get('description', '')}",
        f"Requires-Python: {p.get('requires-python', '')}",
        f"License: {p.get('license', '')}",
    ]
    for d in p.get("dependencies", []):
        lines.append(f"Requires-Dist: {d}")
    for extra, deps in p.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for d in deps:
            lines.append(f"Requires-Dist: {d}; extra == \"{extra}\"")
    readme = os.path.join(ROOT, p.get("readme", "README.md"))
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


# The protocol's Lua library has one home, the repository's docs/hero-library.lua (a Rust test
# keeps it equal to the library the client loads); the wheel carries it inside the package.
LIBRARY = (os.path.join(os.path.dirname(ROOT), "docs", "hero-library.lua"), f"{PACKAGE}/hero-library.lua")


def _files():
    if os.path.exists(LIBRARY[0]):
        yield LIBRARY
    else:  # building from an sdist, which carries it in the package
        packed = os.path.join(ROOT, LIBRARY[1])
        if not os.path.exists(packed):
            # a package without its library could not load it into a Redis that lacks it
            raise RuntimeError(
                "hero-py: the server library hero-library.lua is neither at ../docs/ (a build in the "
                "repository) nor in hero/ (a build from an sdist): build from the repository's python/, "
                "or from the sdist it makes (pip wheel ./python, or python -m build --sdist python)")
        yield packed, LIBRARY[1]
    base = os.path.join(ROOT, PACKAGE)
    for dirpath, _dirs, names in os.walk(base):
        if "__pycache__" in dirpath:
            continue
        for n in sorted(names):
            if n.endswith((".py", ".typed")):
                full = os.path.join(dirpath, n)
                yield full, os.path.relpath(full, ROOT).replace(os.sep, "/")


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _wheel(wheel_directory, entries):
    p = _project()
    name = f"{_dist_name(p)}-{p['version']}"
    info = f"{name}.dist-info"
    wheel_name = f"{name}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        def add(path, data):
            z.writestr(path, data)
            records.append(_record_line(path, data))
        for path, data in entries:
            add(path, data)
        add(f"{info}/METADATA", _metadata(p).encode())
        add(f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: hero-backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        records.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return wheel_name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = []
    for full, rel in _files():
        with open(full, "rb") as f:
            entries.append((rel, f.read()))
    return _wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    return _wheel(wheel_directory, [(f"{_dist_name(p)}.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    name = f"{_dist_name(p)}-{p['version']}"
    path = os.path.join(sdist_directory, f"{name}.tar.gz")
    with tarfile.open(path, "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/backend.py"]:
            t.add(os.path.join(ROOT, rel), arcname=f"{name}/{rel}")
        for full, rel in _files():
            t.add(full, arcname=f"{name}/{rel}")
        info = tarfile.TarInfo(f"{name}/PKG-INFO")
        data = _metadata(p).encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return os.path.basename(path)
