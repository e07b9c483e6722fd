# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put a Hugging Face model's snapshot on disk before vLLM starts (installed by vllm_service).

Run with the vLLM venv's python (huggingface_hub is a vLLM dependency):

    python vllm_fetch_weights.py ORG/NAME --cache-dir DIR [--revision REV] [--mode fetch|look|check]
        [--endpoint URL] [--ignore-pattern P ...] [--allow-pattern P ...] [--secrets-file F --env-reader R] [--user U]
        [--hf-home DIR] [--log F] [--variable NAME]

It uses huggingface_hub's own cache layout in DIR (``models--ORG--NAME/{blobs,snapshots,refs}``), the
one vLLM reads with ``HF_HUB_OFFLINE=1`` (HF_HUB_CACHE / ``--download-dir``), so the server finds the
files without asking the hub.

  look   is the snapshot complete on disk? (``snapshot_download(local_files_only=True)``; no network)
  check  look, and when it is not complete ask the hub what a fetch would download (dry run); fetches nothing
  fetch  look, and when it is not complete download what is missing (``snapshot_download``). Files fetched
         by an earlier, interrupted run are kept and not fetched again; within a run a dropped connection
         is resumed with a Range request (huggingface_hub 2.4 cannot resume a partial file in another
         process: the partial files an earlier, killed run left are removed once --stale-s old). A
         complete snapshot is never re-checked against the hub: the run is offline and changes nothing
         (pin a commit with --revision to move on).

``--secrets-file`` is an env file (KEY=value lines) read for ``HF_TOKEN`` before anything else, so that
the token is never on a command line or in an environment. It is read as systemd reads it for the server's unit,
with the collection's one env-file reader (plugins/module_utils/systemd_env.py, which vllm_service installs on the
box; ``--env-reader`` is its path), so the fetch uses the token the server gets. The file may be root-only: with ``--user``
the script, started as root, reads it and then runs as that user (setgid/setuid) for everything else,
so every file it writes belongs to the service user. Progress bars (one line per ``--progress-s``) and
huggingface_hub's warnings go to ``--log`` (else to stderr).

Prints ONE JSON object on stdout: ok, mode, repo_id, revision, commit, snapshot, cache_dir, present_before,
present, changed, fetched_files, fetched_bytes, files, bytes, seconds, would_fetch, would_fetch_bytes,
log, error (a sentence naming --variable and what to change). Exit status 0 when ok, 1 when not.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

DEFAULT_ENDPOINT = "https://huggingface.co"
LIBRARY = "gpuhost-vllm-fetch-weights"   # the User-Agent's library name: the hub's logs (and tests) tell it from vLLM


# ------------------------------------------------------------------ before dropping privileges

def load_env_reader(path: str):
    """The collection's env-file reader (plugins/module_utils/systemd_env.py, which vllm_service installs on the box),
    loaded by path: this script reads no env file itself."""
    spec = importlib.util.spec_from_file_location("gpuhost_systemd_env", path) if path else None
    if spec is None or spec.loader is None:
        raise RuntimeError("no env-file reader at %r (--env-reader)" % (path,))
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except OSError as exc:
        raise RuntimeError("the env-file reader %s cannot be loaded (%s); vllm_service installs it" % (path, exc)) from exc
    return module


def read_token(path: str, reader: str) -> str:
    """HF_TOKEN (else HUGGING_FACE_HUB_TOKEN, as huggingface_hub takes them) as systemd gives them to the server's unit
    from the secrets file, read with the collection's env-file reader at ``reader``; '' when the file or the key is
    absent. RuntimeError when the reader cannot be loaded or systemd would not read the file."""
    if not path:
        return ""
    module = load_env_reader(reader)
    try:
        env = module.read_env_file(path)
    except FileNotFoundError:
        return ""
    except (OSError, ValueError) as exc:
        raise RuntimeError("cannot read %s: %s" % (path, exc)) from exc
    return env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN") or ""


def become(user: str) -> None:
    """Run as ``user`` from here on (from root: groups, gid, uid). Nothing to do when already that user."""
    if not user:
        return
    import pwd  # pylint: disable=import-outside-toplevel

    try:
        pw = pwd.getpwnam(user)
    except KeyError as exc:
        raise RuntimeError("no such user: %s (vllm_service_user)" % user) from exc
    if os.getuid() == pw.pw_uid:
        return
    if os.getuid() != 0:
        raise RuntimeError("started as uid %d, cannot become %s (start it as root or as that user)" % (os.getuid(), user))
    os.setgroups([])
    os.initgroups(user, pw.pw_gid)
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)
    os.environ.update(USER=user, LOGNAME=user, HOME=pw.pw_dir)
    try:
        os.chdir(pw.pw_dir)
    except OSError:
        os.chdir("/")   # the directory it was started in may be root's alone (Ansible's temporary one)


# ------------------------------------------------------------------ the cache on disk

def repo_folder(cache_dir: str, repo_id: str) -> str:
    return os.path.join(cache_dir, "models--" + repo_id.replace("/", "--"))


def blobs(cache_dir: str, repo_id: str) -> dict:
    """{blob name: size} of the repo's complete blobs."""
    folder = os.path.join(repo_folder(cache_dir, repo_id), "blobs")
    out = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for name in names:
        if name.endswith(".incomplete"):
            continue
        try:
            out[name] = os.path.getsize(os.path.join(folder, name))
        except OSError:
            pass
    return out


def remove_stale_partials(cache_dir: str, repo_id: str, older_than_s: float) -> int:
    """Remove ``blobs/*.incomplete`` not written to for ``older_than_s``: huggingface_hub 2.4 downloads each
    file to a temporary file of its own process and cannot resume it in another, so what a killed fetch (an
    async timeout, a lost connection to the controller) left behind is only used space. Returns the bytes freed."""
    folder = os.path.join(repo_folder(cache_dir, repo_id), "blobs")
    removed, freed = 0, 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0, 0
    now = time.time()
    for name in names:
        if not name.endswith(".incomplete"):
            continue
        path = os.path.join(folder, name)
        try:
            st = os.stat(path)
            if now - st.st_mtime >= older_than_s:
                os.remove(path)
                removed += 1
                freed += st.st_size
        except OSError:
            pass
    return removed, freed


def tree_state(cache_dir: str, repo_id: str) -> dict:
    """{path: file content or None for a directory} of the cache dir and the repo's folder in it (refs, trees)."""
    state = {}
    if os.path.isdir(cache_dir):
        state[cache_dir] = None
    folder = repo_folder(cache_dir, repo_id)
    for base, dirs, names in os.walk(folder):
        state[base] = None
        for name in names:
            path = os.path.join(base, name)
            if os.path.islink(path) or "blobs" in os.path.relpath(path, folder).split(os.sep)[:1]:
                state[path] = b""   # a snapshot link or a blob: only that it is there
                continue
            try:
                with open(path, "rb") as handle:
                    state[path] = handle.read(4096)
            except OSError:
                state[path] = b""
        for name in dirs:
            state[os.path.join(base, name)] = None
    return state


def restore_tree(before: dict, cache_dir: str, repo_id: str) -> None:
    """Undo what a dry run wrote (huggingface_hub 2.4 writes refs/<revision> even then): check mode writes nothing."""
    after = tree_state(cache_dir, repo_id)
    for path in sorted((p for p in after if p not in before), key=len, reverse=True):
        try:
            if after[path] is None:
                os.rmdir(path)
            else:
                os.remove(path)
        except OSError:
            pass
    for path, content in before.items():
        if content and after.get(path) not in (None, content) and not os.path.islink(path):
            try:
                with open(path, "wb") as handle:
                    handle.write(content)
            except OSError:
                pass


def snapshot_files(snapshot: str) -> dict:
    """{relative path: (size, blob name)} of a snapshot folder (its files are links into blobs/)."""
    out = {}
    if not snapshot or not os.path.isdir(snapshot):
        return out
    for base, _dirs, names in os.walk(snapshot):
        for name in names:
            full = os.path.join(base, name)
            real = os.path.realpath(full)
            try:
                size = os.path.getsize(real)
            except OSError:
                continue
            out[os.path.relpath(full, snapshot).replace(os.sep, "/")] = (size, os.path.basename(real))
    return out


# ------------------------------------------------------------------ progress in the log

def log_bar_class(stream, interval: float):
    """A tqdm class for a log file: at most one plain line per ``interval`` seconds per bar (the file count
    and the bytes; no cursor movement, no bar), e.g. ``Downloading bytes: 1.2GB of 15.0GB, 98.1MB/s``."""
    from tqdm import tqdm as std_tqdm  # pylint: disable=import-outside-toplevel

    class _Quiet:
        """What tqdm writes itself (a bare line end when a bar closes) is dropped: display() writes the lines."""

        def __init__(self, out):
            self.out = out

        def write(self, text):
            return len(text)

        def flush(self):
            pass

    class LogBar(std_tqdm):  # pylint: disable=too-many-ancestors
        def __init__(self, *args, **kwargs):
            kwargs.pop("name", None)
            kwargs.update(file=_Quiet(stream), disable=False, miniters=1, mininterval=interval,
                          maxinterval=max(interval, 1.0))
            super().__init__(*args, **kwargs)

        def display(self, msg=None, pos=None):
            desc = (self.desc or "").rstrip(": ")
            if desc.startswith("Reconstruct"):
                return True   # the bytes written: the same figures as the bytes downloaded
            fmt = self.format_dict
            scale = bool(fmt.get("unit_scale"))
            unit = fmt.get("unit") or "it"

            def size(value):
                return self.format_sizeof(value, unit, 1024 if unit == "B" else 1000) if scale else "%d" % value

            line = "%s: %s" % (desc or "progress", size(self.n))
            if self.total:
                line += " of %s" % size(self.total)
            if (line, self.n) == getattr(self, "_last_line", None):
                return True
            self._last_line = (line, self.n)  # pylint: disable=attribute-defined-outside-init
            rate = fmt.get("rate") or (self.n / fmt["elapsed"] if fmt.get("elapsed") else 0)
            if rate:
                line += ", %s/s" % size(rate)
            try:
                stream.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), line))
                stream.flush()
            except ValueError:
                pass   # a bar closed at exit, after the log file
            return True

    return LogBar


def say(stream, text: str) -> None:
    stream.write("%s vllm_fetch_weights: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), text))
    stream.flush()


# ------------------------------------------------------------------ errors, in the operator's words

def explain(exc: BaseException, args: argparse.Namespace, endpoint: str) -> str:
    """A sentence naming the variable to change, for an exception of snapshot_download."""
    from huggingface_hub import errors  # pylint: disable=import-outside-toplevel

    var, repo, rev = args.variable, args.repo_id, args.revision or "main"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, errors.HFValidationError):
        return ("%s: %r is neither an absolute path on the host nor a Hugging Face repo id (org/name: letters, digits, "
                "'-', '_', '.'): %s" % (var, repo, first))
    if isinstance(exc, errors.GatedRepoError):
        return ("%s: %s on %s is gated: accept its terms on the hub with the account of the token, and set "
                "vllm_service_hf_token (or vllm_service_hf_token_file)" % (var, repo, endpoint))
    if isinstance(exc, errors.RepositoryNotFoundError):
        return ("%s: the hub at %s has no model %r that this host may read (%s). Check the repo id; a private "
                "model needs vllm_service_hf_token (or vllm_service_hf_token_file)" % (var, endpoint, repo, first))
    if isinstance(exc, errors.RevisionNotFoundError):
        return ("%s: %r is not a branch, tag or commit of %s on %s (%s)"
                % (args.revision_variable, rev, repo, endpoint, first))
    if isinstance(exc, errors.LocalEntryNotFoundError):
        return ("%s: %s (revision %s) is not complete under %s and the hub at %s cannot be reached (%s). Pre-stage "
                "the snapshot there, point vllm_service_hf_endpoint at a reachable mirror, or serve a local path"
                % (var, repo, rev, args.cache_dir, endpoint, first))
    if isinstance(exc, OSError) and getattr(exc, "errno", None) == 28:
        return "%s: no space left under %s while fetching %s: %s" % (var, args.cache_dir, repo, first)
    name = type(exc).__name__
    if name in ("ConnectError", "ConnectTimeout", "ReadTimeout", "TimeoutException", "RemoteProtocolError",
                "ProxyError", "OfflineModeIsEnabled"):
        return ("%s: fetching %s from %s failed (%s: %s): the hub cannot be reached from this host; point "
                "vllm_service_hf_endpoint at a reachable mirror, pre-stage the snapshot, or set vllm_service_prefetch "
                "to false" % (var, repo, endpoint, name, first))
    return "%s: fetching %s from %s failed: %s: %s" % (var, repo, endpoint, name, first)


# ------------------------------------------------------------------ the work

def run(args: argparse.Namespace, token: str, log) -> dict:
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    if args.mode != "look":
        # huggingface_hub reads these once, at import: a fetch must be allowed to go online.
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            os.environ.pop(name, None)
    if args.hf_home:
        os.environ["HF_HOME"] = args.hf_home
    import huggingface_hub  # pylint: disable=import-outside-toplevel
    from huggingface_hub import constants, errors, snapshot_download  # pylint: disable=import-outside-toplevel

    endpoint = (args.endpoint or constants.ENDPOINT or DEFAULT_ENDPOINT).rstrip("/")
    revision = args.revision or "main"
    common = {"repo_id": args.repo_id, "revision": revision, "cache_dir": args.cache_dir, "library_name": LIBRARY,
              "allow_patterns": args.allow_pattern or None, "ignore_patterns": args.ignore_pattern or None}
    result = {"ok": True, "mode": args.mode, "repo_id": args.repo_id, "revision": revision, "cache_dir": args.cache_dir,
              "endpoint": endpoint, "huggingface_hub": huggingface_hub.__version__, "commit": "", "snapshot": "",
              "present_before": False, "present": False, "changed": False, "fetched_files": [], "fetched_bytes": 0,
              "files": 0, "bytes": 0, "seconds": 0.0, "would_fetch": [], "would_fetch_bytes": 0,
              "log": args.log, "error": ""}
    t0 = time.monotonic()
    before = blobs(args.cache_dir, args.repo_id)
    snapshot = ""
    try:
        snapshot = snapshot_download(local_files_only=True, **common)
        result["present_before"] = True
    except errors.HFValidationError as exc:
        return dict(result, ok=False, error=explain(exc, args, endpoint))
    except (errors.LocalEntryNotFoundError, OSError, ValueError) as exc:
        result["missing"] = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if not result["present_before"] and args.mode == "check":
        untouched = tree_state(args.cache_dir, args.repo_id)
        try:
            plan = snapshot_download(dry_run=True, endpoint=args.endpoint or None, token=token or None,
                                     tqdm_class=log_bar_class(log, args.progress_s), **common)
        # Every failure becomes the operator's sentence.
        except Exception as exc:  # pylint: disable=broad-except
            return dict(result, ok=False, error=explain(exc, args, endpoint), seconds=round(time.monotonic() - t0, 3))
        finally:
            restore_tree(untouched, args.cache_dir, args.repo_id)
        todo = [f for f in plan if f.will_download]
        result.update(would_fetch=sorted(f.filename for f in todo),
                      would_fetch_bytes=sum(int(f.file_size or 0) for f in todo),
                      commit=plan[0].commit_hash if plan else "", changed=bool(todo))
    elif not result["present_before"] and args.mode == "fetch":
        result["stale_partials_removed"], result["stale_partial_bytes_removed"] = remove_stale_partials(
            args.cache_dir, args.repo_id, args.stale_s)
        say(log, "fetching %s (revision %s) from %s into %s" % (args.repo_id, revision, endpoint, args.cache_dir))
        try:
            snapshot = snapshot_download(endpoint=args.endpoint or None, token=token or None,
                                         max_workers=args.max_workers,
                                         tqdm_class=log_bar_class(log, args.progress_s), **common)
        # Every failure becomes the operator's sentence.
        except Exception as exc:  # pylint: disable=broad-except
            error = explain(exc, args, endpoint)
            say(log, "FAILED: " + error)
            after = blobs(args.cache_dir, args.repo_id)
            kept = sorted(set(after) - set(before))
            return dict(result, ok=False, error=error, seconds=round(time.monotonic() - t0, 3),
                        kept_blobs=len(kept), kept_bytes=sum(after[b] for b in kept))
        result.update(present=True, changed=True)
        result.pop("missing", None)
    if snapshot:
        files = snapshot_files(snapshot)
        after = blobs(args.cache_dir, args.repo_id)
        new = set(after) - set(before)
        result.update(snapshot=snapshot, commit=os.path.basename(snapshot.rstrip("/")), files=len(files),
                      bytes=sum(size for size, _blob in files.values()),
                      fetched_files=sorted(rel for rel, (_size, blob) in files.items() if blob in new),
                      fetched_bytes=sum(after[b] for b in new))
        result["present"] = True
    result["seconds"] = round(time.monotonic() - t0, 3)
    if args.mode == "fetch" and result["changed"]:
        say(log, "done: %d files (%d bytes) fetched in %.1f s; snapshot %s" % (
            len(result["fetched_files"]), result["fetched_bytes"], result["seconds"], result["snapshot"]))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("repo_id")
    ap.add_argument("--cache-dir", required=True, help="huggingface_hub's cache (HF_HUB_CACHE / vLLM's download dir)")
    ap.add_argument("--revision", default="", help="branch, tag or commit (default main)")
    ap.add_argument("--mode", choices=("fetch", "look", "check"), default="fetch")
    ap.add_argument("--endpoint", default="", help="the hub (HF_ENDPOINT); '' = huggingface_hub's default")
    ap.add_argument("--allow-pattern", action="append", default=[])
    ap.add_argument("--ignore-pattern", action="append", default=[])
    ap.add_argument("--secrets-file", default="", help="env file holding HF_TOKEN (read here, never passed on)")
    ap.add_argument("--env-reader", default="",
                    help="the collection's env-file reader (systemd_env.py) the secrets file is read with")
    ap.add_argument("--user", default="", help="run as this user once the secrets file is read (from root)")
    ap.add_argument("--hf-home", default="", help="HF_HOME for huggingface_hub's own files")
    ap.add_argument("--log", default="", help="append progress and warnings here (else stderr)")
    ap.add_argument("--progress-s", type=float, default=10.0, help="seconds between progress lines")
    ap.add_argument("--max-workers", type=int, default=8)
    ap.add_argument("--stale-s", type=float, default=300.0,
                    help="remove partial downloads of earlier runs not written to for this long")
    ap.add_argument("--variable", default="vllm_service_model", help="the variable named in error messages")
    ap.add_argument("--revision-variable", default="vllm_service_model_revision",
                    help="the variable named when the revision is unknown")
    args = ap.parse_args(argv)
    base = {"ok": False, "mode": args.mode, "repo_id": args.repo_id, "changed": False, "log": args.log}
    # Only a check or a fetch asks the hub; a look reads the cache alone.
    token, token_note = "", ""
    if args.mode != "look":
        try:
            token = read_token(args.secrets_file, args.env_reader)
        except RuntimeError as exc:
            if args.mode == "fetch":
                print(json.dumps(dict(base, error="vllm_service_hf_token: the token cannot be read: %s" % exc)))
                return 1
            # A check (check mode) before vllm_service ever installed the reader: ask the hub without the token.
            token_note = "asked without the token: %s" % exc
    try:
        become(args.user)
        os.umask(0o027)
        if args.log:
            os.makedirs(os.path.dirname(os.path.abspath(args.log)), exist_ok=True)
            log = open(args.log, "a", encoding="utf-8")  # pylint: disable=consider-using-with
            os.dup2(log.fileno(), 2)   # huggingface_hub's warnings (and anything else) go there too
        else:
            log = sys.stderr
    except (RuntimeError, OSError) as exc:
        print(json.dumps(dict(base, error="%s: %s" % (args.variable, exc))))
        return 1
    if token_note:
        say(log, token_note)
    try:
        result = run(args, token, log)
    # One JSON answer, whatever happened.
    except Exception as exc:  # pylint: disable=broad-except
        result = dict(base, error="%s: %s: %s" % (args.variable, type(exc).__name__, exc))
    if token_note and result.get("error"):
        result["error"] += " (%s)" % token_note
    print(json.dumps(result))
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
