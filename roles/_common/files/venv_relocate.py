"""A venv built at BUILD is renamed to FINAL: point its pyvenv.cfg and its bin/ scripts at FINAL.

argv: BUILD FINAL. Prints how many files changed.
"""
import pathlib
import sys

old, new = sys.argv[1].encode(), sys.argv[2].encode()
root = pathlib.Path(sys.argv[1])
changed = 0
for path in [root / "pyvenv.cfg", *sorted((root / "bin").iterdir())]:
    if path.is_file() and not path.is_symlink():
        data = path.read_bytes()
        if old in data:
            path.write_bytes(data.replace(old, new))
            changed += 1
print(changed)
