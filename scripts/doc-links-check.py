#!/usr/bin/env python3
"""Every citation of a document resolves: `docs/<name>.md#<anchor>` in code and scripts, `<name>.md#<anchor>`
where one document has that name, and the links between the documents. An anchor is an
`<a id="...">` tag or a heading's GitHub slug. Prints each broken citation and exits 1."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SKIPPED_DIRS = {".git", "build", "build-asan", "node_modules"}
CODE_SUFFIXES = {".cpp", ".hpp", ".h", ".py", ".proto", ".sh", ".yaml", ".yml", ".tpl", ".cmake", ".txt", ".toml"}
CODE_NAMES = {"Makefile", "Containerfile", "Dockerfile"}

CITATION = re.compile(r"(?<![\w/.-])((?:docs/)?[\w./-]*\.md)(?:#([\w-]+))?")
MD_LINK = re.compile(r"\]\(([^)\s]*?)(?:#([^)\s]+))?\)")
ANCHOR_TAG = re.compile(r'<a id="([^"]+)"')
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def files():
    for path in ROOT.rglob("*"):
        if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
            yield path


def slug(heading):
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, counts, fenced = set(), {}, False
        for line in path.read_text(encoding="utf-8").splitlines():
            if FENCE.match(line):
                fenced = not fenced
                continue
            found.update(ANCHOR_TAG.findall(line))
            heading = None if fenced else HEADING.match(line)
            if heading:
                base = slug(heading.group(1))
                n = counts.get(base, 0)
                counts[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def resolve(name, relative_to, by_name):
    """The document a citation names, or None where it names none or several."""
    for base in (relative_to, ROOT):
        candidate = (base / name).resolve()
        if candidate.is_file():
            return candidate
    if "/" not in name and len(by_name.get(name, [])) == 1:
        return by_name[name][0]
    return None


def main():
    all_files = list(files())
    docs = [p for p in all_files if p.suffix == ".md"]
    by_name = {}
    for doc in docs:
        by_name.setdefault(doc.name, []).append(doc)
    broken = []

    def check(source, line_no, name, anchor, relative_to, must_exist):
        target = resolve(name, relative_to, by_name) if name else source
        where = f"{source.relative_to(ROOT)}:{line_no}"
        if target is None:
            if must_exist:
                broken.append(f"{where}: no document {name}")
            return
        if anchor and anchor not in anchors(target):
            broken.append(f"{where}: {target.relative_to(ROOT)} has no anchor #{anchor}")

    for path in all_files:
        is_doc = path.suffix == ".md"
        if not is_doc and path.suffix not in CODE_SUFFIXES and path.name not in CODE_NAMES:
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        for line_no, line in enumerate(lines, 1):
            if is_doc:
                for target, anchor in MD_LINK.findall(line):
                    if re.match(r"[a-z]+:", target) or (target and not target.endswith(".md")):
                        continue
                    check(path, line_no, target, anchor, path.parent, True)
            else:
                for name, anchor in CITATION.findall(line):
                    check(path, line_no, name, anchor, ROOT, name.startswith("docs/"))
    for line in broken:
        print(line)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
