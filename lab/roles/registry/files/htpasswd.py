"""Keep an htpasswd file (bcrypt) holding one user with the password read from stdin: written only
when the file does not already verify that password (so a re-run changes nothing). Prints
"written" or "kept". Runs on the registry's node with its python3 (crypt uses libxcrypt's bcrypt)."""

import crypt
import os
import sys

path, user = sys.argv[1], sys.argv[2]
password = sys.stdin.read().rstrip("\n")
try:
    with open(path) as f:
        entries = dict(line.rstrip("\n").split(":", 1) for line in f if ":" in line)
except FileNotFoundError:
    entries = {}
stored = entries.get(user, "")
if stored and crypt.crypt(password, stored) == stored and len(entries) == 1:
    print("kept")
    sys.exit(0)
hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))  # noqa: S324 - bcrypt: the one hash Distribution takes
fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
with os.fdopen(fd, "w") as f:
    f.write(f"{user}:{hashed}\n")
os.replace(path + ".new", path)
print("written")
