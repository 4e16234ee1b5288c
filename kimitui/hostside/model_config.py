"""The served model's ``config.json``, found on the host from the names its server gives (``/v1/models``'
``root`` and ``id``, the name requests are sent with): a folder (absolute, or relative to the server's
working directory), a ``config.json`` itself, or a Hugging Face id looked up in the HF caches
(``models--ORG--NAME/snapshots/REV/config.json``, the revision ``refs/main`` names, else the newest).

Looked at as the server sees its files: for each of the service's processes given, under its root
(``/proc/PID/root``: a container's own file system), from its working directory, with the HF cache its
environment names (``HF_HUB_CACHE``, ``HF_HOME``, ``XDG_CACHE_HOME``, ``HOME``); then as the agent sees them.
Nothing is run and nothing is written: files are read, capped, regular files only.
"""

from __future__ import annotations

import os

from .agent.requests import NotRegularFile, read_regular_file

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from typing import Any

CONFIG_MAX_BYTES = 4 << 20
"""A config.json is a few KB (a multimodal one's some tens): anything larger is not one."""
ENVIRON_MAX_BYTES = 1 << 20
MAX_TRIED = 40
CACHE_VARS = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME")


class Place:
    """One way of seeing the files: a root prefix ("" or /proc/PID/root), a working directory, an
    environment, and what it is called in the answer."""

    def __init__(self, root: str, cwd: str, env: dict[str, str], who: str) -> None:
        self.root, self.cwd, self.env, self.who = root, cwd, env, who

    def caches(self) -> list[str]:
        """The HF hub caches this environment names, in the order huggingface_hub reads them."""
        env, out = self.env, []
        for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
            if env.get(var):
                out.append(env[var])
        if env.get("HF_HOME"):
            out.append(os.path.join(env["HF_HOME"], "hub"))
        if env.get("XDG_CACHE_HOME"):
            out.append(os.path.join(env["XDG_CACHE_HOME"], "huggingface", "hub"))
        if env.get("HOME"):
            out.append(os.path.join(env["HOME"], ".cache", "huggingface", "hub"))
        seen: list[str] = []
        for c in out:
            if c not in seen:
                seen.append(c)
        return seen


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read(ENVIRON_MAX_BYTES)
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq and key.decode("ascii", "replace") in CACHE_VARS:
            env[key.decode("ascii")] = os.fsdecode(value)
    return env


def places(pids: list[int]) -> list[Place]:
    out = []
    for pid in pids:
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            os.stat(f"/proc/{pid}/root/")
        except OSError:  # gone, or another user's and we are not root
            continue
        out.append(Place(f"/proc/{pid}/root", cwd, _environ(pid), f"pid {pid}"))
    out.append(Place("", os.getcwd(), {k: v for k, v in os.environ.items() if k in CACHE_VARS}, "the agent"))
    return out


def _is_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..")


def _snapshot(repo: str) -> str | None:
    """The snapshot folder of a cached repo: the one ``refs/main`` names, else the newest."""
    snaps = os.path.join(repo, "snapshots")
    try:
        with open(os.path.join(repo, "refs", "main"), encoding="ascii") as fh:
            rev = fh.read(100).strip()
        if rev and "/" not in rev and os.path.isdir(os.path.join(snaps, rev)):
            return os.path.join(snaps, rev)
    except (OSError, UnicodeDecodeError):
        pass
    try:
        names = os.listdir(snaps)
    except OSError:
        return None
    dated = []
    for n in names:
        try:
            dated.append((os.stat(os.path.join(snaps, n)).st_mtime, n))
        except OSError:
            continue
    return os.path.join(snaps, max(dated)[1]) if dated else None


def candidates(name: str, place: Place) -> list[tuple[str, str]]:
    """(path as the server sees it, path the agent opens) of the config.json NAME may be, for PLACE."""
    out: list[tuple[str, str]] = []

    def add(seen: str) -> None:
        path = seen if seen.endswith(".json") else os.path.join(seen, "config.json")
        out.append((path, place.root + path))

    if _is_path(name) or name.endswith(".json"):
        path = name
        if path.startswith("~"):
            home = place.env.get("HOME")
            if not home:
                return out
            path = home + path[1:]
        add(os.path.normpath(os.path.join(place.cwd, path)))
        return out
    add(os.path.normpath(os.path.join(place.cwd, name)))  # a folder named like an id, where the server runs
    if name.count("/") <= 1 and ".." not in name.split("/"):
        repo = "models--" + name.replace("/", "--")
        for cache in place.caches():
            snap = _snapshot(place.root + os.path.join(cache, repo))
            if snap is not None:
                seen = snap[len(place.root):]
                out.append((os.path.join(seen, "config.json"), os.path.join(snap, "config.json")))
            else:
                out.append((os.path.join(cache, repo, "snapshots", "*", "config.json"), ""))
    return out


def find_model_config(names: list[str], pids: list[int]) -> dict[str, Any]:
    """The first config.json found for NAMES (in order) among the PIDS' places and the agent's:
    {found: {name, path, where, data (bytes, UTF-8 JSON as read)} or None, tried: [[path, why], ...]}."""
    tried: list[list[str]] = []
    where = places(pids)
    for name in names:
        for place in where:
            for seen, opened in candidates(name, place):
                if not opened:
                    why = "no such cached model"
                else:
                    try:
                        data = read_regular_file(opened, CONFIG_MAX_BYTES + 1)
                    except FileNotFoundError:
                        why = "no such file"
                    except NotRegularFile as exc:
                        why = f"not a regular file: {exc}"
                    except OSError as exc:
                        why = exc.strerror or str(exc)
                    else:
                        if len(data) > CONFIG_MAX_BYTES:
                            why = f"larger than {CONFIG_MAX_BYTES} bytes"
                        else:
                            return {"found": {"name": name, "path": seen, "where": place.who, "data": data},
                                    "tried": tried}
                if len(tried) < MAX_TRIED and [seen, why] not in tried:
                    tried.append([seen, why])
    return {"found": None, "tried": tried}
