#!/usr/bin/env python3
"""Every citation of a document resolves: `docs/<name>.md#<anchor>` in code and scripts,
`<name>.md#<anchor>` where one document has that name, and the links between the documents
(relative to the document, as GitHub resolves them), files as well as anchors. An anchor is an
`<a id="...">` tag or a heading's GitHub slug. Prints each broken citation and exits 1."""
import functools
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CODE_SUFFIXES = {".cpp", ".hpp", ".h", ".py", ".proto", ".sh", ".yaml", ".yml", ".tpl", ".cmake", ".txt", ".toml"}
CODE_NAMES = {"Makefile", "Containerfile", "Dockerfile"}

CITATION = re.compile(r"(?<![\w/.-])((?:docs/)?[\w./-]*\.md)(?:#([\w-]+))?")
MD_LINK = re.compile(r"\]\(([^)\s]*?)(?:#([^)\s]+))?\)")
ANCHOR_TAG = re.compile(r'<a id="([^"]+)"')
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def tracked_files():
    """The files git tracks (a build tree or a stray file is no citation), else every file."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        return [ROOT / name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]
    except (OSError, subprocess.CalledProcessError):
        def ignored(path):
            parts = path.relative_to(ROOT).parts
            return parts[0].startswith("build") or bool({".git", ".cache", "node_modules", "__pycache__"} & set(parts))
        return [p for p in ROOT.rglob("*") if p.is_file() and not ignored(p)]


def unfenced_lines(text):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield number, line


def slug(heading):
    """GitHub's heading anchor: markup dropped, lower case, punctuation but `-` and `_` dropped."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[`*]|<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(path):
    found, counts = set(), {}
    for _, line in unfenced_lines(path.read_text(encoding="utf-8")):
        found.update(ANCHOR_TAG.findall(line))
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(1))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def main():
    files = tracked_files()
    by_name = {}
    for path in files:
        if path.suffix == ".md":
            by_name.setdefault(path.name, []).append(path)
    broken = []

    def shown(path):
        return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path

    def check(source, line_no, target, anchor, what):
        where = f"{shown(source)}:{line_no}"
        if target is None or not target.exists():
            broken.append(f"{where}: no {what}")
        elif anchor and (target.suffix != ".md" or anchor not in anchors(target)):
            broken.append(f"{where}: {shown(target)} has no anchor #{anchor}")

    for path in files:
        if path.suffix == ".md":
            for line_no, line in unfenced_lines(path.read_text(encoding="utf-8")):
                for target, anchor in MD_LINK.findall(line):
                    if re.match(r"[a-z][a-z0-9+.-]*:", target):
                        continue  # a URL
                    resolved = (path.parent / target).resolve() if target else path
                    check(path, line_no, resolved, anchor, f"file {target} beside the document")
        elif path.suffix in CODE_SUFFIXES or path.name in CODE_NAMES:
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError:
                continue
            for line_no, line in enumerate(lines, 1):
                for name, anchor in CITATION.findall(line):
                    if name.startswith("docs/"):
                        check(path, line_no, ROOT / name, anchor, f"document {name}")
                    elif anchor:  # a bare name cites the one document of that name
                        named = by_name.get(pathlib.Path(name).name, [])
                        check(path, line_no, named[0] if len(named) == 1 else None, anchor,
                              f"single document named {name}")
    for line in broken:
        print(line)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
